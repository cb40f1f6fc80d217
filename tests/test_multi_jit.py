"""TinyJit over multi-device functions, and a sharded model training like the unsharded one (CPU devices)."""
import numpy as np
import pytest

from tg_core import Tensor, TinyJit
from tg_core.device import Device
from tg_core.engine.jit import JitError
from tg_core.helpers import Context
from tg_core.nn import LayerNorm, Linear
from tg_core.nn.optim import SGD
from tg_core.tensor import multi
from tg_core.testing.devices import ALLREDUCE_ALGOS as ALGOS
from tg_core.testing.devices import configured_devices

CPUS = [f"CPU:{i}" for i in range(4)]


four_cpus = pytest.fixture(scope="module", autouse=True, name="four_cpus")(configured_devices(CPU={"count": 4}))


@pytest.mark.parametrize("algo", list(ALGOS))
def test_allreduce_in_a_jit_replays_right(algo):
    with Context(**ALGOS[algo]):
        @TinyJit
        def f(p: Tensor) -> Tensor:
            return multi.allreduce(p * 2, "sum") + 1

        for i in range(5):  # eager, capture, then three replays
            a = np.random.default_rng(i).standard_normal((3, 4, 5)).astype(np.float32)
            out = f(Tensor(a).shard(CPUS[:3], axis=0))
            assert out.device == tuple(Device.canonicalize(d) for d in CPUS[:3])
            np.testing.assert_allclose(out.numpy(), (a * 2).sum(0) + 1, rtol=1e-5, atol=1e-5)
        assert f.cnt == 2 and f.jit_cache


def test_sharded_reduce_in_a_jit_and_a_changed_sharding_is_refused():
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * x).sum(0)

    for i in range(5):
        a = np.random.default_rng(i).standard_normal((6, 4)).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(a).shard(CPUS[:2], axis=0)).numpy(), (a * a).sum(0), rtol=1e-5)
    with pytest.raises(JitError, match=r"cannot replay.*argument 0 is a tensor sharded as CPU \[\(0, 6\), \(0, 2\)\]"):
        f(Tensor(a).shard(CPUS[:2], axis=1))


def _model(shard: bool, devs):
    rng = np.random.default_rng(0)
    l1, ln, l2 = Linear(6, 8), LayerNorm(8), Linear(8, 3)
    l1.weight, l1.bias = Tensor(rng.standard_normal((8, 6)).astype(np.float32) * 0.3), Tensor(np.zeros(8, np.float32))
    l2.weight, l2.bias = Tensor(rng.standard_normal((3, 8)).astype(np.float32) * 0.3), Tensor(np.ones(3, np.float32))
    if shard:
        l1.weight.shard_(devs, axis=0)   # along the output axis
        l1.bias.shard_(devs, axis=0)
        ln.weight.shard_(devs)
        ln.bias.shard_(devs)
        l2.weight.shard_(devs, axis=1)   # along the input axis: the matmul contracts it (an allreduce)
        l2.bias.shard_(devs)
    params = [l1.weight, l1.bias, ln.weight, ln.bias, l2.weight, l2.bias]
    return (lambda x: l2(ln(l1(x).relu()))), params


@pytest.mark.parametrize("jit", [False, True])
def test_sharded_model_trains_like_the_unsharded_one(jit):
    devs = CPUS[:2]
    y = np.array([0, 2, 1, 0], dtype=np.int32)
    runs = {}
    for shard in (False, True):
        model, params = _model(shard, devs)
        opt = SGD(params, lr=0.1, momentum=0.9)

        def step(x: Tensor, t: Tensor, model=model, opt=opt) -> Tensor:
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(t).backward()
            opt.step()
            return loss
        run = TinyJit(step) if jit else step
        losses = []
        with Tensor.train():
            for i in range(4):
                x = np.random.default_rng(10 + i).standard_normal((4, 6)).astype(np.float32)
                xt, yt = (Tensor(x), Tensor(y)) if not shard else (Tensor(x).shard(devs), Tensor(y).shard(devs))
                losses.append(run(xt, yt).item())
        runs[shard] = losses, [p.numpy() for p in params]
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-5)
    for got, want in zip(runs[True][1], runs[False][1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
