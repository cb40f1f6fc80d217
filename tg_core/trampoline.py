"""Running recursive algorithms without Python recursion.

A recursive function over a graph (lower this node: first lower its sources) is written as a generator that
yields a generator for each recursive call and receives its result: `x = yield self._lower(src)` instead of
`x = self._lower(src)`. `trampoline` runs the outermost one with an explicit stack of suspended calls, so the
depth of the graph is bounded by memory, not by the interpreter's recursion limit (tensor graphs are chains
of thousands of elementwise ops).
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

T = TypeVar("T")

# a recursive call written as a generator: it yields the calls it makes and returns its result
Call = Generator["Call", Any, T]


def trampoline(call: Call[T]) -> T:
    """The result of `call`, running every call it yields (and theirs) on an explicit stack. An exception
    leaving a call is raised in its caller at the `yield`, as it would be at a recursive call."""
    stack: list[Call] = [call]
    push, pop = stack.append, stack.pop
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            sub = stack[-1].send(value) if error is None else stack[-1].throw(error)
        except StopIteration as done:
            pop()
            if not stack:
                return done.value
            value, error = done.value, None
            continue
        except BaseException as e:
            pop()
            if not stack:
                raise
            error = e
            continue
        push(sub)
        value = None


__all__ = ["Call", "trampoline"]
