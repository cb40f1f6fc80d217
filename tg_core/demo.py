"""`tg demo`: train an MLP on the handwritten digits that scikit-learn ships, on the best installed device.

Nothing is downloaded: `sklearn.datasets.load_digits` reads a file inside the scikit-learn package.
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from typing import Any

import numpy as np

from tg_core.cli import command


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("tg demo needs scikit-learn for its data set: pip install 'tg-core[demo]'") from None
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def train(epochs: int = 12, batch: int = 64, hidden: int = 128, lr: float = 3e-3, seed: int = 0,
          out=sys.stdout, progress: bool = True, parallel: Any = None) -> float:
    """Train and return the final test accuracy. With `parallel` (a `DataParallel`, tg-mpi's world), this process
    is one of `parallel.size`: every process draws the same batches, trains on its slice of each (a batch of
    `batch` in all, so the steps are those of one process), averages the gradients with the others before each
    step, and checks after each step that every process holds the same weights."""
    from tg_core.device import Device
    from tg_core.engine.realize import stats
    from tg_core.nn import Linear
    from tg_core.nn.optim import Adam
    from tg_core.nn.state import get_parameters
    from tg_core.tensor import Tensor

    x_train, y_train, x_test, y_test = load_digits_split(seed)
    Tensor.manual_seed(seed)
    device = Device.DEFAULT if parallel is None else parallel.device
    rank, size = (0, 1) if parallel is None else (parallel.rank, parallel.size)
    if batch < size:
        raise ValueError(f"tg demo: --batch {batch} is smaller than the {size} processes it is split across")
    l1, l2 = Linear(64, hidden), Linear(hidden, 10)
    params = get_parameters([l1, l2])

    def model(x: Tensor) -> Tensor:
        return l2(l1(x).relu())

    opt: Any = Adam(params, lr=lr)
    where = f"on {device}" if parallel is None else f"on {size} processes (this is rank {rank}, on {device})"
    if parallel is not None:
        parallel.broadcast_parameters(params)
        opt = parallel.distributed(opt)
    print(f"tg demo: a 64-{hidden}-10 MLP on scikit-learn's digits ({len(x_train)} train, {len(x_test)} test) "
          f"{where}", file=out)
    rng = np.random.default_rng(seed)
    steps = len(x_train) // batch
    acc = 0.0
    for epoch in range(1, epochs + 1):
        start, kernels0 = time.perf_counter(), stats["kernels"]
        order = rng.permutation(len(x_train))
        loss_sum = 0.0
        with Tensor.train():
            for step in range(steps):
                idx = order[step * batch:(step + 1) * batch]
                idx = np.array_split(idx, size)[rank]  # this process's slice of the batch (all of it alone)
                xb, yb = Tensor(x_train[idx], device=device), Tensor(y_train[idx], device=device)
                opt.zero_grad()
                loss = model(xb).sparse_categorical_crossentropy(yb)
                loss.backward()
                opt.step()
                loss_sum += loss.item() if parallel is None else parallel.mean(loss.item())
                if parallel is not None and not parallel.all_equal(params):
                    raise RuntimeError(f"tg demo: the weights differ between processes after step {step + 1} of "
                                       f"epoch {epoch}")
                if progress and out.isatty():
                    print(f"\r  epoch {epoch:2d} {_bar(step + 1, steps)}", end="", file=out, flush=True)
        pred = model(Tensor(x_test, device=device)).argmax(axis=1).numpy()
        acc = float((pred == y_test).mean())
        elapsed = time.perf_counter() - start
        if progress and out.isatty():
            print("\r", end="", file=out)
        print(f"  epoch {epoch:2d} {_bar(steps, steps)}  loss {loss_sum / steps:.4f}  test accuracy {acc * 100:5.1f}%  "
              f"{elapsed:5.2f} s  {stats['kernels'] - kernels0} kernels", file=out, flush=True)
    return acc


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=12, help="passes over the training set (default 12)")
    p.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--hidden", type=int, default=128, help="hidden layer width (default 128)")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data split, init and shuffling (default 0)")
    p.add_argument("--data-parallel", action="store_true",
                   help="train on every process of an MPI job (`mpiexec -n 2 tg demo --data-parallel`, needs tg-mpi): "
                        "each takes a slice of every batch, gradients are averaged across them")


@command("demo", "train an MLP on scikit-learn's handwritten digits on the best installed device", _demo_args)
def demo_command(args: argparse.Namespace) -> int:
    for name in ("epochs", "batch", "hidden"):
        if getattr(args, name) < 1:
            print(f"tg demo: --{name} must be at least 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    parallel = None
    if args.data_parallel:
        from tg_core.plugins.manager import get_registry
        parallel = get_registry().data_parallel()
        if parallel is None:
            print("tg demo: --data-parallel needs a plugin that runs processes together, e.g. tg-mpi "
                  "(python -m pip install tg-mpi), started as `mpiexec -n 2 tg demo --data-parallel`", file=sys.stderr)
            return 2
    quiet = parallel is not None and parallel.rank != 0  # one report per job, from rank 0
    acc = train(args.epochs, args.batch, args.hidden, args.lr, args.seed, out=io.StringIO() if quiet else sys.stdout,
                parallel=parallel)
    if parallel is not None and parallel.rank != 0:
        return 0 if acc >= 0.95 else 1  # rank 0 reports for the job
    print(f"final test accuracy {acc * 100:.1f}%" + ("" if acc >= 0.95 else " (below the 95% this demo should reach)"))
    return 0 if acc >= 0.95 else 1
