"""The core plugin API version and the version ranges plugins declare against it.

The API version changes when a hook contract, `Compiled`, `Allocator` or `Buffer` changes in a way a
plugin can notice: the major part on breaking changes, the minor part on additions. A plugin declares
the range it works with as comma-separated clauses, e.g. ">=1.0,<2". The grammar is deliberately tiny
(operators >=, >, <=, <, ==, != on dotted integers) so that phase-one discovery needs no packaging library.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Callable

API_VERSION: tuple[int, ...] = (1, 2)  # 1.1: Tensor, DataParallel, tg_data_parallel; 1.2: profile_events/state
API_VERSION_STR = ".".join(map(str, API_VERSION))

_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")
_OPS: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}


def parse_version(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(?:\.\d+)*", text.strip()):
        raise ValueError(f"not a version: {text!r} (expected dotted integers such as 1.0)")
    return tuple(int(p) for p in text.strip().split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # "1" and "1.0" are the same version
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


def parse_range(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """Clauses of a range such as ">=1.0,<2". Raises ValueError naming the bad clause."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"an API range must be a non-empty string such as '>=1.0,<2', got {spec!r}")
    clauses = []
    for part in spec.split(","):
        m = _CLAUSE.match(part)
        if m is None:
            raise ValueError(f"bad clause {part.strip()!r} in the API range {spec!r}; "
                             "use operators >=, >, <=, <, ==, != on versions such as 1.0")
        clauses.append((m.group(1), parse_version(m.group(2))))
    return clauses


def in_range(version: tuple[int, ...], spec: str) -> bool:
    """True when `version` satisfies every clause of `spec`."""
    return all(_OPS[op](*_padded(version, v)) for op, v in parse_range(spec))
