"""Fails on import, as a plugin with a missing native library would."""


def _load_native_library() -> None:
    raise RuntimeError("tg-test-broken fails on purpose")


_load_native_library()
