"""`tg demo`: the MLP reaches 95% on the digits test split; bad arguments are refused."""
import io

import pytest

from tg_core.cli import main
from tg_core.demo import load_digits_split, train


def test_digits_split_is_deterministic_and_disjoint():
    x_train, y_train, x_test, y_test = load_digits_split(seed=0)
    assert x_train.shape == (1438, 64) and x_test.shape == (359, 64)
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(y_train.tolist()) == set(range(10))
    again = load_digits_split(seed=0)
    assert (again[0] == x_train).all() and (again[3] == y_test).all()


@pytest.mark.parametrize("arg", ["--epochs=0", "--batch=0", "--hidden=-3"])
def test_bad_arguments_are_refused(arg, capsys):
    assert main(["demo", arg]) == 2
    assert "must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_trains_to_95_percent():
    out = io.StringIO()
    acc = train(epochs=12, out=out, progress=False)
    text = out.getvalue()
    assert acc >= 0.95, text
    assert "on PYTHON" in text or " on " in text.splitlines()[0]
    assert text.count("kernels") == 12 and "test accuracy" in text
