"""helpers: environment lookups, context variables and Context scopes, integer helpers."""
import itertools
import threading

import numpy as np
import pytest

from tg_core.helpers import (
    DEBUG,
    REWRITE_STEP_LIMIT,
    Context,
    ContextVar,
    all_same,
    argsort,
    cdiv,
    ceildiv,
    cmod,
    dedup,
    flatten,
    getenv,
    prod,
    round_up,
)

# context variables are process-wide and registered by name once: the test ones get unique names
TV_INT = ContextVar("TG_TEST_HELPERS_INT", 3)
TV_STR = ContextVar("TG_TEST_HELPERS_STR", "abc")


@pytest.fixture
def env(monkeypatch):
    getenv.cache_clear()
    yield monkeypatch
    getenv.cache_clear()


def test_getenv_converts_to_the_type_of_the_default(env):
    env.setenv("TG_T_INT", "12")
    env.setenv("TG_T_FLOAT", "2.5")
    env.setenv("TG_T_STR", "hello")
    assert getenv("TG_T_INT") == 12 and getenv("TG_T_INT", 0) == 12
    assert getenv("TG_T_FLOAT", 1.0) == 2.5
    assert getenv("TG_T_STR", "") == "hello"
    assert getenv("TG_T_MISSING") == 0 and getenv("TG_T_MISSING", "dflt") == "dflt"


@pytest.mark.parametrize("raw, want", [("1", True), ("true", True), ("YES", True), ("0", False), ("false", False),
                                       ("Off", False), ("no", False), ("", False)])
def test_getenv_bools(env, raw, want):
    env.setenv("TG_T_BOOL", raw)
    assert getenv("TG_T_BOOL", False) is want


def test_getenv_bad_value_names_the_variable(env):
    env.setenv("TG_T_BAD", "1.5")
    with pytest.raises(ValueError, match=r"TG_T_BAD='1.5' must be a int"):
        getenv("TG_T_BAD", 0)


def test_contextvar_reads_the_environment_once(env):
    env.setenv("TG_TEST_HELPERS_FROM_ENV", "7")
    v = ContextVar("TG_TEST_HELPERS_FROM_ENV", 1)
    assert v.value == 7 and v.default == 1 and v.key == "TG_TEST_HELPERS_FROM_ENV"
    assert ContextVar.get("TG_TEST_HELPERS_FROM_ENV") is v
    with pytest.raises(ValueError, match="defined twice"):
        ContextVar("TG_TEST_HELPERS_FROM_ENV", 2)


def test_contextvar_compares_by_value():
    with Context(TG_TEST_HELPERS_INT=3):
        assert TV_INT == 3 and TV_INT >= 3 and TV_INT <= 3 and TV_INT > 2 and TV_INT < 4
        assert not TV_INT > 3 and not TV_INT < 3 and bool(TV_INT)
        assert repr(TV_INT) == "ContextVar(TG_TEST_HELPERS_INT=3)"
    with Context(TG_TEST_HELPERS_INT=0):
        assert not TV_INT
    assert {TV_INT: 1}[TV_INT] == 1  # hashable by identity


def test_context_manager_sets_and_restores():
    before = TV_INT.value, TV_STR.value
    with Context(TG_TEST_HELPERS_INT=10, TG_TEST_HELPERS_STR="x") as ctx:
        assert (TV_INT.value, TV_STR.value) == (10, "x")
        assert isinstance(ctx, Context)
        with Context(TG_TEST_HELPERS_INT=20):
            assert (TV_INT.value, TV_STR.value) == (20, "x")
        assert TV_INT.value == 10
    assert (TV_INT.value, TV_STR.value) == before


def test_context_restores_after_an_exception():
    before = TV_INT.value
    with pytest.raises(RuntimeError):
        with Context(TG_TEST_HELPERS_INT=99):
            raise RuntimeError("boom")
    assert TV_INT.value == before


def test_context_restores_a_value_changed_inside_it():
    before = TV_INT.value
    with Context(TG_TEST_HELPERS_INT=5):
        TV_INT.value = 6
    assert TV_INT.value == before


def test_unknown_context_variable_raises_before_anything_changes():
    before = TV_INT.value
    with pytest.raises(KeyError, match="unknown context variable NOT_A_TG_VAR; known: .*DEBUG"):
        Context(TG_TEST_HELPERS_INT=42, NOT_A_TG_VAR=1)
    assert TV_INT.value == before
    with pytest.raises(KeyError, match="NOT_A_TG_VAR"):
        ContextVar.get("NOT_A_TG_VAR")


def test_context_as_decorator():
    @Context(TG_TEST_HELPERS_INT=11)
    def f(x):
        """doc"""
        return TV_INT.value + x
    before = TV_INT.value
    assert f(1) == 12 and TV_INT.value == before
    assert f.__name__ == "f" and f.__doc__ == "doc"


def test_context_decorator_on_a_recursive_function_restores_each_level():
    seen = []

    @Context(TG_TEST_HELPERS_INT=100)
    def rec(n):
        seen.append(("in", n, TV_INT.value))
        if n > 0:
            TV_INT.value = n  # each level changes it; the inner call's exit must give this back
            rec(n - 1)
            seen.append(("after", n, TV_INT.value))
        return TV_INT.value

    before = TV_INT.value
    assert rec(3) == 3
    assert seen == [("in", 3, 100), ("in", 2, 100), ("in", 1, 100), ("in", 0, 100),
                    ("after", 1, 1), ("after", 2, 2), ("after", 3, 3)]
    assert TV_INT.value == before


def test_context_decorator_nested_with_other_contexts():
    @Context(TG_TEST_HELPERS_INT=1)
    def inner():
        return TV_INT.value, TV_STR.value

    with Context(TG_TEST_HELPERS_STR="outer", TG_TEST_HELPERS_INT=50):
        assert inner() == (1, "outer")
        assert TV_INT.value == 50


def test_builtin_context_variables():
    assert ContextVar.get("DEBUG") is DEBUG and ContextVar.get("REWRITE_STEP_LIMIT") is REWRITE_STEP_LIMIT
    assert REWRITE_STEP_LIMIT.default == 1_000_000
    with Context(DEBUG=4):
        assert DEBUG.value == 4


def test_context_in_threads_shares_process_wide_values():
    # values are process-wide on purpose (compile threads must agree with the scheduling thread)
    got = []
    with Context(TG_TEST_HELPERS_INT=77):
        t = threading.Thread(target=lambda: got.append(TV_INT.value))
        t.start()
        t.join()
    assert got == [77]


def test_cdiv_cmod_are_c_division():
    a = np.arange(-40, 41, dtype=np.int64)
    for b in itertools.chain(range(-9, 0), range(1, 10)):
        rem = np.fmod(a, b)  # C remainder: the sign of the dividend
        quo = (a - rem) // b
        assert [cdiv(int(x), b) for x in a] == quo.tolist()
        assert [cmod(int(x), b) for x in a] == rem.tolist()
    assert cdiv(-7, 2) == -3 and cmod(-7, 2) == -1 and cdiv(7, -2) == -3 and cmod(7, -2) == 1
    big = 2 ** 100 + 12345
    assert cdiv(-big, 7) * 7 + cmod(-big, 7) == -big and cdiv(-big, 7) == -(big // 7)
    with pytest.raises(ZeroDivisionError):
        cdiv(1, 0)


def test_ceildiv_round_up():
    for a in range(-20, 21):
        for b in (1, 2, 3, 7, -3):
            assert ceildiv(a, b) == int(np.ceil(a / b))
    assert round_up(13, 4) == 16 and round_up(16, 4) == 16 and round_up(0, 8) == 0


def test_small_helpers():
    assert prod([2, 3, 4]) == 24 and prod([]) == 1 and prod([2.5], 2) == 5.0
    assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert all_same([]) and all_same([1, 1]) and not all_same([1, 2])
    assert flatten([[1], [], [2, 3]]) == [1, 2, 3]
    assert argsort([30, 10, 20]) == [1, 2, 0]
