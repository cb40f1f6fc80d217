"""Small utilities shared by every part of tg: environment lookups, context variables, math on shapes."""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, TypeVar

T = TypeVar("T")


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """The environment variable `key` converted to the type of `default` (int by default)."""
    raw = os.environ.get(key)
    if raw is None:
        return default
    if isinstance(default, bool):
        return raw.lower() not in ("", "0", "false", "no", "off")
    try:
        return type(default)(raw)
    except ValueError:
        raise ValueError(f"environment variable {key}={raw!r} must be a {type(default).__name__}") from None


class ContextVar(Generic[T]):
    """A named setting read from the environment once and changed in scopes with `Context`.

    The value is process-wide (not thread-local) on purpose: compile options must agree between the
    thread that schedules and the threads that compile."""
    _registry: ClassVar[dict[str, ContextVar]] = {}
    value: T

    def __init__(self, key: str, default: T):
        if key in ContextVar._registry:
            raise ValueError(f"context variable {key} is defined twice")
        self.key, self.default = key, default
        self.value = getenv(key, default)
        ContextVar._registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, x: Any) -> bool:
        return self.value >= x

    def __gt__(self, x: Any) -> bool:
        return self.value > x

    def __lt__(self, x: Any) -> bool:
        return self.value < x

    def __le__(self, x: Any) -> bool:
        return self.value <= x

    def __eq__(self, x: object) -> bool:
        return self.value == x

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value!r})"

    @staticmethod
    def get(key: str) -> ContextVar:
        if key not in ContextVar._registry:
            raise KeyError(f"unknown context variable {key}; known: {', '.join(sorted(ContextVar._registry))}")
        return ContextVar._registry[key]


class Context:
    """Set context variables for a scope. Works as `with Context(DEBUG=2):` and as `@Context(DEBUG=2)`.

    Each entry saves the values it replaces on a per-instance stack, so one Context object used as a
    decorator on a recursive function restores the outer values correctly at every level."""

    def __init__(self, **kwargs: Any):
        for k in kwargs:
            ContextVar.get(k)  # unknown names fail here, before anything changes
        self.kwargs = kwargs
        self._saved: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Context:
        saved = {k: ContextVar.get(k).value for k in self.kwargs}
        with self._lock:
            self._saved.append(saved)
        for k, v in self.kwargs.items():
            ContextVar.get(k).value = v
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            saved = self._saved.pop()
        for k, v in saved.items():
            ContextVar.get(k).value = v

    def __call__(self, fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            with self:
                return fn(*args, **kwargs)
        return wrapper


DEBUG = ContextVar("DEBUG", 0)
CHECK_OOB = ContextVar("CHECK_OOB", 0)
REWRITE_STEP_LIMIT = ContextVar("REWRITE_STEP_LIMIT", 1_000_000)


def prod(xs: Iterable[T], start: Any = 1) -> Any:
    out = start
    for x in xs:
        out = out * x
    return out


def dedup(xs: Iterable[T]) -> list[T]:
    """Items in first-seen order, each once."""
    return list(dict.fromkeys(xs))


def all_same(xs: list[Any]) -> bool:
    return all(x == xs[0] for x in xs[1:])


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    return [x for xs in xss for x in xs]


def argsort(xs: list[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)


def cdiv(a: int, b: int) -> int:
    """Division truncating toward zero, as C and every backend divide integers."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def cmod(a: int, b: int) -> int:
    """Remainder with the sign of the dividend, so that a == cdiv(a, b) * b + cmod(a, b)."""
    return a - cdiv(a, b) * b


def ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, multiple: int) -> int:
    return ceildiv(x, multiple) * multiple
