"""Movement ops built from the six primitives (reshape, permute, expand, pad, shrink, flip), and indexing.

**Indexing.** `x[...]` first applies the basic indices axis by axis: an int is a shrink to one element
(dropped by a reshape), a slice is a shrink, a flip when its step is negative, and for a step s > 1 a
reshape of the k*s elements to (k, s) that keeps column 0; None adds an axis. Integer tensors (and lists)
then gather: each index becomes a one-hot mask against the element index of its axis, and a sum over the
indexed axes picks the element (one reduce, fused with its consumer). As in numpy and PyTorch, the
broadcast index shape goes where the indexed axes were when they are adjacent, and in front otherwise
(ints are basic indices, as in PyTorch, so they never separate tensor indices). A boolean mask is turned
into the integer positions of its true elements; that shape depends on data, so the mask is realized.

**Assignment.** `x[...] = v` follows the storage model of storage.py's `assign`. When the selection is a
plain view of x's storage (reshapes, permutes, shrinks, flips over a buffer), v is assigned to it: only
those elements are written, and every view of the storage sees them. Otherwise x is assigned
`mask.where(v', x)`, where v' is v placed back into x's shape by the inverse movement ops (pads and a
reshape for strides) and mask is the same placement of ones; with tensor indices, each element of x
compares its position with the positions selected (one-hot again).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tg_core.dtype import dtypes, least_upper_dtype
from tg_core.helpers import prod
from tg_core.tensor.args import broadcast_shape, int_arg, ints_arg, sint_arg, sints_arg
from tg_core.tensor.base import TensorBase
from tg_core.tensor.checks import check_range
from tg_core.uop.ops import Ops
from tg_core.uop.sint import as_dim, canonical, smax, smin
from tg_core.uop.uop import UOp

if TYPE_CHECKING:
    from tg_core.tensor.tensor import Tensor


@dataclass(frozen=True)
class _AxisSel:
    """What a basic index keeps of one axis: k elements from `lo` upwards every `step`, then reversed if
    `flip`; `drop` when the index was an int. `lo` and `k` may be symbolic ints (sint.py; step 1)."""
    lo: int
    step: int
    k: int
    flip: bool
    drop: bool


class MovementMixin(TensorBase):
    __slots__ = ()

    # ---- shapes --------------------------------------------------------------------------------------------

    def view(self, shape, *args) -> Tensor:
        return self.reshape(shape, *args)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = self._axis(dim0, "dim0"), self._axis(dim1, "dim1")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim, "start_dim"), self._axis(end_dim, "end_dim")
        if s > e:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        d = self._axis(dim, "dim")
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(n for n in self.shape if n != 1))
        axes = self._axes(dim, "dim")
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if not (i in axes and n == 1)))

    def unsqueeze(self, dim: int) -> Tensor:
        n = self.ndim + 1
        if not -n <= int_arg(dim, "unsqueeze: dim") < n:
            raise IndexError(f"unsqueeze: dim {dim} is out of range for a tensor of shape {self.shape} "
                             f"(allowed: {-n} to {n - 1})")
        d = dim % n
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def pad(self, padding: Sequence, mode: str = "constant", value: float | int | bool = 0) -> Tensor:
        """Pad with `value`: one (before, after) pair (or None) per axis, or PyTorch's flat form (last axis
        first). Negative amounts remove elements. An amount may be a symbolic int (tg_core/uop/sint.py) that is
        non-negative for every value of its variables (constant mode)."""
        pairs = _pad_pairs(padding, self.shape)
        if any(isinstance(x, UOp) for p in pairs for x in p):
            return self._sym_pad(pairs, mode, value)
        if mode != "constant":
            return self._pad_from_edges(pairs, mode, value)
        x = self.shrink(tuple((max(0, -b), n - max(0, -a)) for (b, a), n in zip(pairs, self.shape)))
        pos = tuple((max(0, b), max(0, a)) for b, a in pairs)
        out = x._new(x.uop.pad(pos))
        if value == 0 or all(p == (0, 0) for p in pos):
            return out
        inside = type(self).ones(x.shape, dtype=dtypes.bool, device=self.device)
        return inside._new(inside.uop.pad(pos)).where(out, value)

    def _sym_pad(self, pairs: list[tuple[Any, Any]], mode: str, value: float | int | bool) -> Tensor:
        """pad with symbolic amounts: constant mode only, each amount >= 0 for every value of its variables."""
        if mode != "constant":
            raise ValueError(f"pad mode {mode!r} takes int amounts; symbolic amounts pad in mode 'constant' only")
        pos = tuple((sint_arg(b, "pad: a symbolic amount", lo=0), sint_arg(a, "pad: a symbolic amount", lo=0))
                    for b, a in pairs)
        out = self._new(self.uop.pad(pos))
        if value == 0:
            return out
        inside = type(self).ones(self.shape, dtype=dtypes.bool, device=self.device)
        return inside._new(inside.uop.pad(pos)).where(out, value)

    def _pad_from_edges(self, pairs: list[tuple[int, int]], mode: str, value: float | int | bool) -> Tensor:
        """pad's modes that copy the input (PyTorch's): 'reflect' mirrors about the edge element, 'replicate'
        repeats it, 'circular' wraps around. Each axis is a cat of slices of the input, so gradients flow."""
        if mode not in ("reflect", "replicate", "circular"):
            raise ValueError(f"pad mode {mode!r} is not one of 'constant', 'reflect', 'replicate', 'circular'")
        if value != 0:
            raise ValueError(f"pad mode {mode!r} takes no value (got value={value!r}); only 'constant' fills")
        x = cast("Tensor", self)
        for d, ((b, a), n) in enumerate(zip(pairs, self.shape)):
            if b == a == 0:
                continue
            if b < 0 or a < 0:
                raise ValueError(f"pad mode {mode!r}: padding {pairs[d]} of axis {d} is negative; only 'constant' "
                                 "removes elements")
            limit = n - 1 if mode == "reflect" else n if mode == "circular" else None
            if n == 0 or (limit is not None and max(b, a) > limit):
                raise ValueError(f"pad mode {mode!r}: padding {pairs[d]} of axis {d} (size {n}) of {self.shape} is too "
                                 f"large (allowed: at most {limit if limit is not None else 'any'} per side for a "
                                 "non-empty axis)")

            def part(lo: int, hi: int, x: Tensor = x, d: int = d) -> Tensor:
                return x.shrink(tuple((lo, hi) if i == d else None for i in range(x.ndim)))
            if mode == "reflect":
                before, after = part(1, b + 1).flip(d), part(n - 1 - a, n - 1).flip(d)
            elif mode == "circular":
                before, after = part(n - b, n), part(0, a)
            else:
                ends = [part(0, 1), part(n - 1, n)]
                grow = [tuple(k if i == d else s for i, s in enumerate(x.shape)) for k in (b, a)]
                before, after = ends[0].expand(grow[0]), ends[1].expand(grow[1])
            x = before.cat(x, after, dim=d)
        return x

    def repeat(self, repeats: int | Sequence[int], *args: int) -> Tensor:
        reps = ints_arg(tuple(repeats) if isinstance(repeats, Sequence) and not args else (repeats, *args),
                        "repeat: the repeat counts", lo=0)
        if len(reps) < self.ndim:
            raise ValueError(f"repeat needs at least {self.ndim} repeat counts for shape {self.shape}, got {reps}")
        base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter = sum(((1, n) for n in base.shape), ())
        grown = sum(((r, n) for r, n in zip(reps, base.shape)), ())
        return base.reshape(inter).expand(grown).reshape(tuple(r * n for r, n in zip(reps, base.shape)))

    # ---- joining and splitting -----------------------------------------------------------------------------

    def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
        """Concatenate along `dim`: each piece is padded to the full length and the pieces are added."""
        pieces = [cast("Tensor", self), *others]
        d = self._axis(dim, "dim")
        for t in others:
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
                raise ValueError(f"cat along dim {dim}: shapes {self.shape} and {t.shape} differ outside that dim")
        dt = least_upper_dtype(*(t.dtype for t in pieces))
        total = sum(t.shape[d] for t in pieces)
        out, offset = None, 0
        for t in pieces:
            n = t.shape[d]
            if n != 0:  # a symbolic size is not known to be empty
                pad = [(0, 0)] * self.ndim
                pad[d] = (offset, total - offset - n)
                placed = t._cast_to(dt).pad(pad)
                out = placed if out is None else (out | placed if dt is dtypes.bool else out + placed)
            offset += n
        if out is None:
            return self._cast_to(dt)
        return out

    def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
        for t in others:
            if t.shape != self.shape:
                raise ValueError(f"stack needs tensors of one shape, got {self.shape} and {t.shape}")
        return self.unsqueeze(dim).cat(*(t.unsqueeze(dim) for t in others), dim=dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        d = self._axis(dim, "dim")
        n = self.shape[d]
        if not isinstance(sizes, (tuple, list)):
            sizes = int_arg(sizes, "split: the split size", lo=1)
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        sizes = ints_arg(sizes, "split: the split sizes", lo=0)
        if sum(sizes) != n:
            raise ValueError(f"split sizes {list(sizes)} do not add up to {n}, the size of dim {dim} of {self.shape}")
        out, start = [], 0
        for s in sizes:
            out.append(self.shrink(tuple((start, start + s) if i == d else None for i in range(self.ndim))))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        int_arg(chunks, "chunk: the number of chunks", lo=1)
        n = self.shape[self._axis(dim, "dim")]
        return self.split(max(1, -(-n // chunks)), dim)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Shift elements along dims, wrapping around (PyTorch's roll); dims=None rolls the flattened tensor."""
        if dims is None:
            if isinstance(shifts, (tuple, list)) and len(shifts) != 1:
                raise ValueError(f"roll: without dims, shifts is one int, got {shifts!r}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        sh = ints_arg(shifts, "roll: shifts") if isinstance(shifts, (tuple, list)) else (int_arg(shifts, "roll: shifts"),)
        ds = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if len(sh) != len(ds):
            raise ValueError(f"roll: shifts {shifts!r} and dims {dims!r} must have the same length")
        x = cast("Tensor", self)
        for s, dim in zip(sh, ds):
            d = self._axis(dim, "dim")
            n = self.shape[d]
            if n == 0 or s % n == 0:
                continue
            k = s % n   # the last k elements come first
            parts = x.split([n - k, k], d)
            x = parts[1].cat(parts[0], dim=d)
        return x

    def repeat_interleave(self, repeats: int | Sequence[int], dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along dim (the flattened tensor when dim is None), PyTorch's
        repeat_interleave; repeats is an int or one count per element of that axis."""
        if dim is None:
            return self.flatten().repeat_interleave(repeats, 0)
        d = self._axis(dim, "dim")
        n = self.shape[d]
        if isinstance(repeats, (tuple, list)):
            reps = ints_arg(repeats, "repeat_interleave: repeats", lo=0)
            if len(reps) != n:
                raise ValueError(f"repeat_interleave: {len(reps)} repeat counts for dim {dim} of size {n} in "
                                 f"{self.shape} (allowed: one count per element, or one int)")
            # the counts are known on the host: each output position names its source element
            parts = [self.shrink(tuple((j, j + 1) if i == d else None for i in range(self.ndim)))
                     .expand(tuple(r if i == d else s for i, s in enumerate(self.shape))) for j, r in enumerate(reps) if r]
            if not parts:
                return self.shrink(tuple((0, 0) if i == d else None for i in range(self.ndim)))
            return parts[0].cat(*parts[1:], dim=d)
        r = int_arg(repeats, "repeat_interleave: repeats", lo=0)
        x = self.unsqueeze(d + 1)
        x = x.expand(tuple(r if i == d + 1 else s for i, s in enumerate(x.shape)))
        return x.reshape(self.shape[:d] + (n * r,) + self.shape[d + 1:])

    def meshgrid(self, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids from 1-D tensors (PyTorch's meshgrid): with 'ij' output k varies along axis k;
        with 'xy' the first two axes are swapped (numpy's Cartesian order)."""
        if indexing not in ("ij", "xy"):
            raise ValueError(f"meshgrid: indexing is 'ij' or 'xy', got {indexing!r}")
        ts = [cast("Tensor", self), *others]
        for t in ts:
            if t.ndim > 1:
                raise ValueError(f"meshgrid needs 0-d or 1-d tensors, got one of shape {t.shape}")
        ts = [t.reshape(-1) for t in ts]
        axis_of = list(range(len(ts)))   # the output axis input k varies along
        if indexing == "xy" and len(ts) > 1:
            axis_of[0], axis_of[1] = 1, 0
        shape = [0] * len(ts)
        for k, t in enumerate(ts):
            shape[axis_of[k]] = t.shape[0]
        return tuple(t.reshape(tuple(-1 if i == axis_of[k] else 1 for i in range(len(ts)))).expand(tuple(shape))
                     for k, t in enumerate(ts))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of the (dim1, dim2) planes as a new last axis (PyTorch's diagonal; a view): offset > 0
        is above the main diagonal, < 0 below."""
        off = int_arg(offset, "diagonal: offset")
        d1, d2 = self._axis(dim1, "dim1"), self._axis(dim2, "dim2")
        if self.ndim < 2 or d1 == d2:
            raise ValueError(f"diagonal needs two different dims of a tensor of at least 2 dims, got dim1={dim1}, "
                             f"dim2={dim2} for shape {self.shape}")
        rest = [i for i in range(self.ndim) if i not in (d1, d2)]
        x = self.permute(rest + [d1, d2])
        n1, n2 = self.shape[d1], self.shape[d2]
        r0, c0 = max(0, -off), max(0, off)
        m = max(0, min(n1 - r0, n2 - c0))
        lead = x.shape[:-2]
        if m == 0:
            return x.shrink(tuple(None for _ in lead) + ((0, 0), (0, 1 if n2 else 0))).reshape(lead + (0,))
        x = x.shrink(tuple(None for _ in lead) + ((r0, r0 + m), (c0, c0 + m)))
        # element i*(m+1) of the flattened m x m square is [i, i]: a (m, m+1) view puts them in column 0
        x = x.reshape(lead + (m * m,)).pad(tuple((0, 0) for _ in lead) + ((0, m),)).reshape(lead + (m, m + 1))
        return x.shrink(tuple(None for _ in lead) + (None, (0, 1))).reshape(lead + (m,))

    def diag(self, diagonal: int = 0) -> Tensor:
        """PyTorch's diag: a 1-D tensor becomes the square matrix with it on the `diagonal`-th diagonal; a 2-D
        tensor gives that diagonal."""
        k = int_arg(diagonal, "diag: diagonal")
        if self.ndim == 2:
            return self.diagonal(k)
        if self.ndim != 1:
            raise ValueError(f"diag needs a 1-D or 2-D tensor, got shape {self.shape}")
        n = self.shape[0]
        i = type(self)._iota(n, self.device)
        sq = i.reshape(n, 1).eq(i.reshape(1, n)).where(self.unsqueeze(1), False if dtypes.is_bool(self.dtype) else 0)
        a = abs(k)
        return sq.pad(((0, a), (a, 0)) if k >= 0 else ((a, 0), (0, a)))

    # ---- indexing ------------------------------------------------------------------------------------------

    def __getitem__(self, indices: Any) -> Tensor:
        sels, nones, tensors = self._parse_indices(indices)
        x = self._apply_basic(sels, nones)
        if not tensors:
            return x
        out = x._gather_advanced([(pos, t) for _, pos, t in tensors])
        for d, _, t in tensors:  # -n <= index < n, negative ones counting from the end (PyTorch)
            n = self.shape[d]
            out = check_range(out, t, -n, n, _describe_index(d, n, self.shape))
        return out

    def __setitem__(self, indices: Any, value: Any) -> None:
        v = self._operand(value)  # a Tensor as it is
        if isinstance(indices, type(self)) and indices.dtype is dtypes.bool and indices.shape == self.shape \
                and v.numel() == 1:
            # x[mask] = scalar needs no positions: it stays lazy
            self.assign(indices.where(v._cast_to(self.dtype).reshape(()), self))
            return
        sels, nones, tensors = self._parse_indices(indices)
        if tensors:
            self.assign(self._setitem_advanced(indices, v))
            return
        view = self._apply_basic(sels, nones)
        try:
            v = v._cast_to(self.dtype)._broadcast_to(view.shape)
        except ValueError:
            raise ValueError(f"cannot assign a value of shape {v.shape} to a selection of shape {view.shape}") from None
        if _is_storage_view(view.uop):
            # a plain view of storage: write just the selected elements
            view.assign(v)
            return
        mask = type(self).ones(view.shape, dtype=dtypes.bool, device=self.device)
        self.assign(_unapply_basic(mask, sels, self.shape).where(_unapply_basic(v, sels, self.shape), self))

    def _parse_indices(self, indices: Any) -> tuple[list[_AxisSel], list[int], list[tuple[int, int, Tensor]]]:
        """Per axis of self its basic selection; the positions in the basic result of the axes None adds;
        the tensor indices as (axis of self, axis of the basic result, index)."""
        T = type(self)
        idx = self._masks_to_positions(indices if isinstance(indices, tuple) else (indices,))
        if sum(i is Ellipsis for i in idx) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if consumed > self.ndim:
            raise IndexError(f"too many indices for a tensor of shape {self.shape}: {consumed} axes indexed")
        full: list[Any] = []
        for i in idx:
            if i is Ellipsis:
                full.extend([slice(None)] * (self.ndim - consumed))
            else:
                full.append(i)
        full.extend([slice(None)] * (self.ndim - sum(1 for i in full if i is not None)))
        sels: list[_AxisSel] = []
        nones: list[int] = []     # positions (in the basic result) of the new axes
        tensors: list[tuple[int, int, Tensor]] = []
        out_pos = 0
        for i in full:
            if i is None:
                nones.append(out_pos)
                out_pos += 1
                continue
            d = len(sels)
            n = self.shape[d]
            if isinstance(i, (bool, np.bool_)):
                raise IndexError("indexing with a Python bool is not supported")
            if _symbolic_index(i, n):
                sel = _symbolic_sel(i, n, d, self.shape)
                sels.append(sel)
                out_pos += 0 if sel.drop else 1
                continue
            if isinstance(i, (int, np.integer)):
                i = int(i)
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {d} with size {n} (shape {self.shape})")
                sels.append(_AxisSel(i % n, 1, 1, False, True))
                continue
            if isinstance(i, slice):
                start, stop, step = i.indices(n)
                k = len(range(start, stop, step))
                lo = start if step > 0 else start + (k - 1) * step
                sels.append(_AxisSel(lo if k else 0, abs(step), k, step < 0, False))
                out_pos += 1
                continue
            if isinstance(i, (list, tuple, np.ndarray)):
                arr = np.asarray(i)
                if not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
                    raise IndexError(f"index arrays must hold integers or bools, got {arr.dtype}")
                if arr.size and (arr.min() < -n or arr.max() >= n):
                    bad = int(arr.min()) if arr.min() < -n else int(arr.max())
                    raise IndexError(f"index {bad} is out of bounds for axis {d} with size {n} (shape {self.shape})")
                i = T(arr.astype(np.int32), device=self.device)
            if isinstance(i, T):
                if not dtypes.is_int(i.dtype):
                    raise IndexError(f"tensor indices must be integers or bools, got {i.dtype!r}")
                sels.append(_AxisSel(0, 1, n, False, False))
                tensors.append((d, out_pos, cast("Tensor", i)))
                out_pos += 1
                continue
            raise IndexError(f"cannot index a tensor with {type(i).__name__} {i!r}")
        return sels, nones, tensors

    def _masks_to_positions(self, idx: tuple) -> tuple:
        """Boolean masks become the integer arrays of their true positions (PyTorch's rule). The result's shape
        depends on the mask's values, so a mask tensor is realized here."""
        out: list[Any] = []
        for i in idx:
            is_tensor = isinstance(i, type(self))
            if is_tensor and i.dtype is dtypes.bool or not is_tensor and isinstance(i, (list, np.ndarray)) \
                    and np.asarray(i).dtype == np.bool_:
                arr = i.numpy() if is_tensor else np.asarray(i)
                d = sum(1 for j in out if j is not None)
                if arr.ndim == 0 or Ellipsis not in out and arr.shape != self.shape[d:d + arr.ndim]:
                    raise IndexError(f"a boolean mask of shape {arr.shape} does not match the axes {d}.. of "
                                     f"shape {self.shape}")
                out.extend(p.astype(np.int32) for p in np.nonzero(arr))
            else:
                out.append(i)
        return tuple(out)

    def _apply_basic(self, sels: list[_AxisSel], nones: list[int]) -> Tensor:
        x = cast("Tensor", self)
        for d, s in enumerate(sels):
            x = _select_axis(x, d, s)
        kept = [n for n, s in zip(x.shape, sels) if not s.drop]
        for p in nones:
            kept.insert(p, 1)
        return x.reshape(tuple(kept))

    def _gather_advanced(self, adv: list[tuple[int, Tensor]]) -> Tensor:
        T = type(self)
        idx_shape: tuple[int, ...] = ()
        for _, t in adv:
            idx_shape = broadcast_shape(idx_shape, t.shape)
        nb = len(idx_shape)
        x = self.reshape((1,) * nb + self.shape)
        mask: Tensor | None = None
        for p, t in adv:
            n = self.shape[p]
            # in a dtype that holds -n .. n-1 and every index (t + n of an int8 index would wrap)
            fits = dtypes.min(t.dtype) >= -2 ** 31 and dtypes.max(t.dtype) < 2 ** 31 - n
            wide = dtypes.int32 if fits else dtypes.int64
            t = t._broadcast_to(idx_shape)._cast_to(wide)
            t = (t < 0).where(t + n, t)
            ar = T._iota(n, self.device).reshape((1,) * (nb + p) + (n,) + (1,) * (self.ndim - p - 1))
            m = t.reshape(idx_shape + (1,) * self.ndim).eq(ar)
            mask = m if mask is None else mask & m
        axes = tuple(nb + p for p, _ in adv)
        zero = False if dtypes.is_bool(self.dtype) else 0
        assert mask is not None  # adv holds at least one index: __getitem__ calls this only with tensor indices
        out = mask.where(x, zero).sum(axis=axes).cast(self.dtype)
        positions = sorted(p for p, _ in adv)
        if positions == list(range(positions[0], positions[0] + len(positions))) and positions[0] > 0:
            # adjacent indexed axes: the index shape takes their place (numpy's rule)
            first = positions[0]
            order = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, out.ndim))
            out = out.permute(order)
        return out

    def _setitem_advanced(self, indices: Any, v: Tensor) -> Tensor:
        T = type(self)
        positions = T._iota(self.numel(), self.device).reshape(self.shape)[indices]
        try:
            vv = v._cast_to(self.dtype)._broadcast_to(positions.shape)
        except ValueError:
            raise ValueError(f"cannot assign a value of shape {v.shape} to a selection of shape "
                             f"{positions.shape}") from None
        k = positions.ndim
        flat_self = T._iota(self.numel(), self.device).reshape(self.shape + (1,) * k)
        hit = flat_self.eq(positions.reshape((1,) * self.ndim + positions.shape))
        axes = tuple(range(self.ndim, self.ndim + k))
        if not axes:
            return hit.where(vv, self)
        # with repeated positions one of the values wins, as in PyTorch (here: the largest)
        zero = False if dtypes.is_bool(self.dtype) else dtypes.min(self.dtype)
        picked = hit.where(vv.reshape((1,) * self.ndim + vv.shape), zero).max(axis=axes)
        return hit.any(axis=axes).where(picked, self)


def _symbolic_index(i: Any, n: Any) -> bool:
    """Whether a basic index involves a symbolic int (its bounds, or the axis size of a slice)."""
    if isinstance(i, UOp):
        return True
    return isinstance(i, slice) and (isinstance(n, UOp) or any(isinstance(v, UOp) for v in (i.start, i.stop, i.step)))


def _symbolic_sel(i: Any, n: Any, d: int, shape: tuple) -> _AxisSel:
    """The selection of a symbolic index (tg_core/uop/sint.py): an int-like UOp picks one element, a slice keeps
    [start, stop) with step 1. Bounds are not clamped or counted from the end (their sign and size are not
    known): they must lie in [0, n] for every value of their variables, or the index is an error."""
    def show(x: Any) -> str:
        return x.render() if isinstance(x, UOp) else str(x)
    if isinstance(i, UOp):
        v = sint_arg(i, f"index of axis {d}")
        if smin(v) < 0 or smin(canonical(n - v)) < 1:
            raise IndexError(f"the symbolic index {show(v)} (values {smin(v)} to {smax(v)}) can be out of bounds for "
                             f"axis {d} with size {show(n)} (shape {shape}); a symbolic index is in [0, size) for "
                             "every value of its variables (negative ones do not count from the end)")
        return _AxisSel(v, 1, 1, False, True)
    if i.step not in (None, 1):
        raise IndexError(f"a slice with symbolic bounds or of a symbolic axis takes step 1 (or none), got {i.step!r} "
                         f"for axis {d} of shape {shape}")
    start = sint_arg(0 if i.start is None else i.start, f"slice start of axis {d}")
    stop = sint_arg(n if i.stop is None else i.stop, f"slice stop of axis {d}")
    if not isinstance(n, int) and (isinstance(start, int) and start < 0 or isinstance(stop, int) and stop < 0):
        raise IndexError(f"a negative slice bound of the symbolic axis {d} (size {show(n)}, shape {shape}) does not "
                         "count from the end: its size is not known; give bounds in [0, size]")
    if isinstance(n, int):  # int bounds of a known size count from the end, as Python's do
        start = start + n if isinstance(start, int) and start < 0 else start
        stop = stop + n if isinstance(stop, int) and stop < 0 else stop
    k = canonical(stop - start)
    if smin(start) < 0 or smin(k) < 0 or smin(canonical(n - stop)) < 0:
        raise IndexError(f"the slice [{show(start)}:{show(stop)}] of axis {d} with size {show(n)} (shape {shape}) is not "
                         "inside the axis for every value of its variables: symbolic bounds need 0 <= start <= stop <= "
                         "size (they are not clamped)")
    return _AxisSel(start, 1, as_dim(k), False, False)


def _describe_index(d: int, n: int, shape: tuple[int, ...]) -> Callable[[int], str]:
    """check_range's message for an index out of range of axis `d` (size `n`) of `shape`."""
    return lambda v: f"index {v} is out of bounds for axis {d} with size {n} (shape {shape})"


def _is_storage_view(u: UOp) -> bool:
    """A chain of RESHAPE/PERMUTE/SHRINK/FLIP over a BUFFER: writable in place (no PAD, no EXPAND)."""
    while u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.DETACH):
        u = u.src[0]
    return u.op is Ops.BUFFER


def _select_axis(x: Tensor, d: int, s: _AxisSel) -> Tensor:
    n = x.shape[d]
    if s.k == 0:
        return x.shrink(tuple((0, 0) if i == d else None for i in range(x.ndim)))
    span = (s.k - 1) * s.step + 1
    if (s.lo, s.step, s.k, s.flip) == (0, 1, n, False):
        return x
    # the k*s elements we reshape into (k, s) when they are all inside the axis, else the span padded to it
    whole = s.k * s.step
    if s.step > 1 and not s.flip and s.lo + whole <= n:
        x = x.shrink(tuple((s.lo, s.lo + whole) if i == d else None for i in range(x.ndim)))
    elif s.step > 1 and s.flip and s.lo + span - whole >= 0:
        x = x.shrink(tuple((s.lo + span - whole, s.lo + span) if i == d else None for i in range(x.ndim)))
    else:
        x = x.shrink(tuple((s.lo, s.lo + span) if i == d else None for i in range(x.ndim)))
    if s.flip:
        x = x.flip(d)
    if s.step > 1:
        if x.shape[d] < whole:
            x = x.pad(tuple((0, whole - x.shape[d]) if i == d else (0, 0) for i in range(x.ndim)))
        x = x.reshape(x.shape[:d] + (s.k, s.step) + x.shape[d + 1:])
        x = x.shrink(tuple((0, 1) if i == d + 1 else None for i in range(x.ndim)))
        x = x.reshape(x.shape[:d + 1] + x.shape[d + 2:])
    return x


def _unapply_basic(v: Tensor, sels: list[_AxisSel], shape: tuple[int, ...]) -> Tensor:
    """`v` (of the basic selection's shape) placed back into `shape`; elements not selected are zero."""
    per_axis = tuple(s.k for s in sels)
    x = v.reshape(per_axis)
    for d, s in enumerate(sels):
        if s.k == 0:
            x = x.pad(tuple((0, shape[d]) if i == d else (0, 0) for i in range(x.ndim)))
            continue
        if s.flip:
            x = x.flip(d)
        if s.step > 1:
            x = x.reshape(x.shape[:d] + (s.k, 1) + x.shape[d + 1:])
            x = x.pad(tuple((0, s.step - 1) if i == d + 1 else (0, 0) for i in range(x.ndim)))
            x = x.reshape(x.shape[:d] + (s.k * s.step,) + x.shape[d + 2:])
            x = x.shrink(tuple((0, (s.k - 1) * s.step + 1) if i == d else None for i in range(x.ndim)))
        span = x.shape[d]
        x = x.pad(tuple((s.lo, shape[d] - s.lo - span) if i == d else (0, 0) for i in range(x.ndim)))
    return x


def _pad_pairs(padding: Sequence, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    if not isinstance(padding, (tuple, list)):
        raise TypeError(f"padding must be a tuple or list, got {padding!r}")
    if all(isinstance(p, (int, UOp)) for p in padding):
        if len(padding) % 2 or len(padding) // 2 > len(shape):
            raise ValueError(f"flat padding {tuple(padding)} needs an even length of at most {2 * len(shape)} "
                             f"for shape {shape}")
        pairs = [(0, 0)] * len(shape)
        for j in range(len(padding) // 2):
            pairs[len(shape) - 1 - j] = (padding[2 * j], padding[2 * j + 1])
        return pairs
    if len(padding) != len(shape):
        raise ValueError(f"padding {tuple(padding)} needs one (before, after) pair per axis of {shape}")
    given = [(0, 0) if p is None else sints_arg(p, "pad: a (before, after) pair") for p in padding]
    if any(len(p) != 2 for p in given):
        raise ValueError(f"padding {tuple(padding)} needs one (before, after) pair per axis of {shape}")
    pairs = [(p[0], p[1]) for p in given]
    for (b, a), n in zip(pairs, shape):
        if not (type(b) is int and type(a) is int and type(n) is int):
            continue  # symbolic amounts are checked to be non-negative by _sym_pad
        if b + a < -n:
            raise ValueError(f"padding {tuple(padding)} removes more than the axis of size {n} in {shape}")
    return pairs

