"""From tensor graph to kernel ASTs: pick realize points, and turn everything between them into index math.

Each realized node becomes one kernel. Its output gets one RANGE per axis; walking the graph down from the
output, movement ops become index expressions on those ranges (`_lower`), elementwise ops are inlined, a
REDUCE_AXIS becomes a REDUCE over fresh ranges, and a realized input becomes a LOAD. So an elementwise chain,
an elementwise producer of a reduce and an elementwise consumer of it (even one that broadcasts the reduce
back over the reduced axis, as softmax does) all land in one kernel; codegen computes each reduce once per
the ranges it depends on.

A REDUCE_AXIS is realized on its own instead when, inlined, it would be recomputed: when its indices
depend on the range of an enclosing reduction while the kernel has output ranges it does not depend on
(a matmul feeding another matmul). An elementwise value inside a reduction (A of a matmul, computed once
per output column) is realized on its own (`_worth_realizing`) when the reduction's loop body would compute
each of its elements at least REALIZE_READS times and it costs more than a load, or more than once when it
is the epilogue of a reduction that would be realized anyway: the bias and relu of one layer of an MLP are
computed once, in the kernel of the matmul that produces them, not in every tile of the next one. Cheap
values (a buffer through movement ops and casts), index math and one-hot masks stay inlined, as do
elementwise values read by elementwise consumers.

ASSIGN(dest, value) writes `value` into an existing buffer through `dest`, a view of it (a chain of
RESHAPE/PERMUTE/SHRINK/FLIP/DETACH over a BUFFER): the kernel's store index is the index the view reads.
Realizing it returns the buffer; reading it afterwards reads through `dest`. The ASSIGN targets of one
schedule are simultaneous (each value is what it was before any of them): every other target is realized
first, then every value that reads a buffer written in this schedule (other than its own destination at
the very index it stores to) is realized into a temporary, and only then do the writes run.

AFTER(x, *writes) is `x` once the ASSIGNs `writes` have run (schedule/multi.py builds each device's allreduce
result as its buffer written chunk by chunk this way); they are realized before anything reads `x` through it.

Between devices that share memory (`device.shares_memory`: CPU devices), a COPY that a kernel reads is that read
done in place: a view of storage is read where it is, and a computed value is realized once on its own device and
loaded from there. A COPY realized as such (a target, `.to()`) stays a copy into a buffer of the destination's.
A write into a peer's buffer whose value is such a read of another write's destination is stored by that write's
kernel too (`find_mirrors`): one kernel, several stores of one value.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

from tg_core.codegen.block_ranges import split_block_ranges
from tg_core.dtype import dtypes
from tg_core.trampoline import Call, trampoline
from tg_core.uop.ops import AxisType, GroupOp, KernelInfo, Ops
from tg_core.uop.sint import buffer_view, canonical, has_sym, smax
from tg_core.uop.symbolic import simplify
from tg_core.uop.uop import UOp
from tg_core.uop.validate import check_oob

_ZERO = UOp.const(dtypes.weakint, 0)

# An elementwise value inside a reduction whose loop body would compute each of its elements this many times
# or more (A of a matmul is computed once per output column: N times) is realized into its own buffer, in the
# spirit of Inductor's realize_reads_threshold. Measured with A = relu(h + b) from buffers, (256, 1024) @
# (1024, N), kernel CPU time fused / realized: CPU:LLVM 0.7 (N=16), 0.9 (32, 64), 1.1 (128), 1.3 (256),
# 1.4 (512); CPU:X86 1.0 (32), 1.1 (64), 1.3 (128), 1.45 (256). The register tile computes A once per 16
# columns, so a small N recomputes little while realizing costs a kernel that writes and rereads A; 128 is
# where realizing wins on both renderers.
REALIZE_READS = 128


@dataclass(frozen=True)
class Reduction:
    """A reduction being lowered: its reduce ranges, and every range its loop body runs over (the ranges
    of the place it is computed at, plus its reduce ranges)."""
    ranges: tuple[UOp, ...]
    body: frozenset[UOp]


def strides_for(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, 0 for an axis of size 1; a symbolic dim (sint.py) gives symbolic strides."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(out))


def _nonzero(x: int | UOp) -> bool:
    """Whether a stride or offset may be non-zero (a symbolic one always may)."""
    return type(x) is not int or x != 0


def _many(n: int | UOp) -> bool:
    """Whether an axis of size `n` needs a range: more than one element, or a symbolic size."""
    return type(n) is not int or n > 1


def flat_index(idxs: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
    acc: UOp = _ZERO
    for i, st in zip(idxs, strides_for(shape)):
        if _nonzero(st):
            acc = acc + i * st
    return acc


def unflatten(flat: UOp, shape: tuple[int, ...]) -> tuple[UOp, ...]:
    out = []
    for n, st in zip(shape, strides_for(shape)):
        out.append(_ZERO if n == 1 else (flat // st) % n)
    return tuple(out)


def _same_dim(a: int | UOp, b: int | UOp) -> bool:
    return a is b or type(a) is int and type(b) is int and a == b  # symbolic dims are canonical: equal is identical


def reshape_index(idxs: tuple[UOp, ...], shape: tuple[int, ...], src: tuple[int, ...]) -> tuple[UOp, ...]:
    """The indices into `src` of the element at `idxs` of its reshape to `shape`. The dims both shapes begin and end
    with (size-1 axes skipped) keep their index; only the middle is flattened and re-split, simplified right away:
    `(r0*2+r1)//2` with r1 < 2 is just r0, and decisions below look at the ranges an index really depends on. For a
    symbolic dim (sint.py) this is more than tidiness: re-splitting divides by the variable, per element (a decode
    step's attention over a KV cache ran 30-50x slower so). Int shapes are flattened whole, as simplification
    leaves the same indices (and their kernels keep the ASTs the backends are tested on)."""
    if not (has_sym(shape) or has_sym(src)):
        return tuple(simplify(x) for x in unflatten(flat_index(idxs, shape), src))
    head: list[UOp] = []
    i, j = 0, 0
    while i < len(shape) and j < len(src):
        if _same_dim(shape[i], 1) and not _same_dim(src[j], 1):
            i += 1
        elif _same_dim(src[j], 1):
            head.append(_ZERO)
            j += 1
            i += _same_dim(shape[i], 1)
        elif _same_dim(shape[i], src[j]):
            head.append(idxs[i])
            i, j = i + 1, j + 1
        else:
            break
    tail: list[UOp] = []
    ei, ej = len(shape), len(src)
    while ei > i and ej > j:
        if _same_dim(shape[ei - 1], 1) and not _same_dim(src[ej - 1], 1):
            ei -= 1
        elif _same_dim(src[ej - 1], 1):
            tail.append(_ZERO)
            ej -= 1
            ei -= _same_dim(shape[ei - 1], 1)
        elif _same_dim(shape[ei - 1], src[ej - 1]):
            tail.append(idxs[ei - 1])
            ei, ej = ei - 1, ej - 1
        else:
            break
    mid_src = src[j:ej]
    mid = tuple(simplify(x) for x in unflatten(flat_index(idxs[i:ei], shape[i:ei]), mid_src)) if mid_src else ()
    return (*head, *mid, *reversed(tail))


@dataclass
class Kernel:
    """A kernel being built: its AST is made once `value` is lowered."""
    name: str
    params: list[UOp] = field(default_factory=list)      # BUFFER nodes, PARAM i reads params[i]
    ranges: itertools.count = field(default_factory=itertools.count)
    output_ranges: tuple[UOp, ...] = ()
    memo: dict = field(default_factory=dict)

    def param(self, buf: UOp) -> UOp:
        if buf not in self.params:
            if self.params and not _shares_memory(self.params[0].src[1].arg, buf.src[1].arg):
                # a device's kernel cannot address another device's memory (the Tensor API copies with .to())
                raise ValueError(f"kernel {self.name} runs on {self.params[0].src[1].arg} but would read a buffer of "
                                 f"{buf.arg} x {buf.dtype!r} on {buf.src[1].arg}; move that tensor with "
                                 f".to({self.params[0].src[1].arg!r})")
            self.params.append(buf)
        i = self.params.index(buf)
        return UOp.param(i, buf.dtype.ptr(buf.arg))

    def new_range(self, size: int, kind: AxisType) -> UOp:
        return UOp.range(size, next(self.ranges), kind)


class Scheduler:
    """Builds the kernels that realize a set of tensor nodes, in an order that respects their inputs."""

    def __init__(self) -> None:
        self.realized: dict[UOp, UOp] = {}      # tensor node -> its BUFFER
        self.items: list[tuple[UOp, list[UOp]]] = []  # (kernel AST, BUFFER nodes by PARAM index)
        self.names = itertools.count()
        self.staged: dict[UOp, UOp] = {}       # ASSIGN -> the copy of its value it writes instead
        self.mirrors: dict[UOp, list[UOp]] = {}  # ASSIGN -> writes into peers' buffers of its value (find_mirrors)
        self.mirrored: dict[UOp, UOp] = {}       # such a write -> the ASSIGN whose kernel stores it

    # ---- realize points -----------------------------------------------------------------------------------

    def realize(self, u: UOp, device: str | None = None) -> UOp:
        """The BUFFER holding `u`'s value, scheduling the kernel that computes it if needed. `device` is
        where a node with no buffer in its graph (a constant) is computed."""
        return trampoline(self._realize(u, device))

    # Lowering recurses through the tensor graph (and into the kernels of the realize points it meets), and
    # tensor graphs are chains of thousands of ops: every recursive step below is a generator run by
    # `trampoline`, `x = yield self._lower(...)` standing for the call.

    def _realize(self, u: UOp, device: str | None = None) -> Call[UOp]:
        if u.op is Ops.BUFFER:
            return u
        if u in self.realized:
            return self.realized[u]
        base = _buffer_view(u)
        if base is not None:
            return base
        if u.op is Ops.ASSIGN:
            return (yield self._realize_assign(u))
        if u.op is Ops.CALL and u.src[0].op is Ops.SINK:
            return self._realize_custom(u)
        if u.op is Ops.AFTER:
            yield self._realize_effects(u)
            return (yield self._realize(u.src[0], device))
        if u.op is Ops.COPY:
            src = yield self._realize(u.src[0])
            out = UOp.new_buffer(u.src[1].arg, src.arg, src.dtype)
            self.items.append((UOp(Ops.COPY, dtypes.void, (out, src)), [out, src]))
            self.realized[u] = out
            return out
        device = u.device or device
        if device is None:
            raise ValueError(f"cannot realize {u.render()[:80]}: it reads no buffer, so give it a device")
        # a symbolic shape (sint.py) is computed into a buffer of its largest size, for every value of its variables
        size = smax(canonical(u.numel)) if has_sym(u.tensor_shape) else u.numel
        if size == 0:
            raise ValueError(f"nothing to realize in a tensor of shape {u.shape}")
        out = UOp.new_buffer(device, size, u.dtype)
        k = Kernel(name=f"k{next(self.names)}_{_kernel_name(u)}")
        k.param(out)
        shape = u.tensor_shape
        idxs = tuple(k.new_range(n, AxisType.LOOP) if _many(n) else _ZERO for n in shape)
        k.output_ranges = tuple(i for i in idxs if i.op is Ops.RANGE)
        src = u.src[0] if u.op is Ops.CONTIGUOUS else u
        value = yield self._lower(k, src, idxs, None, ())
        store = UOp(Ops.STORE, dtypes.void, (k.param(out).index(flat_index(idxs, shape)), value))
        ast = UOp(Ops.SINK, dtypes.void, (store.end(*k.output_ranges),), KernelInfo(k.name))
        self._emit(ast, k)
        self.realized[u] = out
        return out

    def _realize_effects(self, u: UOp) -> Call[None]:
        """Run the writes an AFTER orders its value after."""
        for e in u.src[1:]:
            if e.op is not Ops.ASSIGN:
                raise ValueError(f"a tensor-level AFTER orders its value after ASSIGNs, not {e.op}")
            yield self._realize(e)

    def _emit(self, ast: UOp, k: Kernel) -> None:
        """Add a finished kernel: its index math simplified and, with CHECK_OOB=1, every access proven in bounds."""
        ast = split_block_ranges(simplify(ast))
        check_oob(ast)
        self.items.append((ast, list(k.params)))

    def _realize_custom(self, u: UOp) -> UOp:
        """A custom kernel (tensor/custom.py): CALL(kernel AST, *BUFFERs), PARAM i of the AST being BUFFER i. It is
        its own kernel item, written as given (simplified, checked with CHECK_OOB=1); it returns its first buffer."""
        ast, bufs = u.src[0], list(u.src[1:])
        ast = simplify(ast)
        check_oob(ast)
        self.items.append((ast, bufs))
        self.realized[u] = bufs[0]
        return bufs[0]

    # ---- writes into existing buffers ------------------------------------------------------------------

    def _write_kernel(self, u: UOp) -> Call[tuple[Kernel, UOp, UOp]]:
        """A kernel over `u`'s destination: the INDEX it stores to, and the lowered value."""
        dest, value = u.src[0], self.staged.get(u, u.src[1])
        k = Kernel(name=f"k{next(self.names)}_assign_{_kernel_name(value)}")
        k.param(_view_base(dest))
        idxs = tuple(k.new_range(n, AxisType.LOOP) if _many(n) else _ZERO for n in dest.tensor_shape)
        k.output_ranges = tuple(i for i in idxs if i.op is Ops.RANGE)
        target = yield self._lower(k, dest, idxs, None, ())
        if target.op is not Ops.LOAD:
            raise ValueError(f"cannot assign through {dest.render()[:80]}: the destination must be a view of a buffer")
        return k, target.src[0], (yield self._lower(k, value, idxs, None, ()))

    def prepare_writes(self, writes: list[UOp]) -> None:
        """Realize the values of `writes` that would read a buffer after one of them wrote it."""
        written = {_view_base(w.src[0]) for w in writes}
        for w in writes:
            k, store_at, value = trampoline(self._write_kernel(w))
            own = k.params[0]
            for n in value.toposort():
                if n.op is Ops.INDEX and n.src[0].op is Ops.PARAM and k.params[n.src[0].arg] in written \
                        and not (k.params[n.src[0].arg] is own and n is store_at):
                    # a copy even when the value is a buffer itself: that buffer may be written first
                    value = w.src[1]
                    staged = self.realize(UOp(Ops.CONTIGUOUS, value.dtype, (value,)))
                    self.staged[w] = buffer_view(staged, value.tensor_shape)
                    break

    def _realize_assign(self, u: UOp) -> Call[UOp]:
        if u in self.realized:
            return self.realized[u]
        if u in self.mirrored:  # stored by the kernel of the write it reads
            yield self._realize(self.mirrored[u])
            if u in self.realized:
                return self.realized[u]
        k, store_at, value = yield self._write_kernel(u)
        stores = [UOp(Ops.STORE, dtypes.void, (store_at, value))]
        mirrors = list(self.mirrors.get(u, ()))
        if mirrors:
            ranges = iter(k.output_ranges)
            idxs = tuple(next(ranges) if _many(n) else _ZERO for n in u.src[0].tensor_shape)
        for m in mirrors:  # the same value stored into each peer's buffer too, and into the peers that read those
            if m in self.realized:
                continue
            target = yield self._lower(k, m.src[0], idxs, None, ())
            stores.append(UOp(Ops.STORE, dtypes.void, (target.src[0], value)))
            self.realized[m] = _view_base(m.src[0])
            mirrors.extend(self.mirrors.get(m, ()))
        ast = UOp(Ops.SINK, dtypes.void, tuple(st.end(*k.output_ranges) for st in stores), KernelInfo(k.name))
        self._emit(ast, k)
        self.realized[u] = out = k.params[0]
        return out

    def find_mirrors(self, targets: Sequence[UOp]) -> None:
        """Note the writes into a peer's buffer whose value is another write's destination read in place
        (ASSIGN(dest', COPY(ASSIGN(dest, v))) of the same shape, the two devices sharing memory): the kernel
        of the first write stores `v` at both, instead of a second kernel reading it back."""
        for n in UOp(Ops.SINK, dtypes.void, tuple(targets)).toposort():
            if n.op is not Ops.ASSIGN or n.src[1].op is not Ops.COPY or n.src[1].src[0].op is not Ops.ASSIGN:
                continue
            w = n.src[1].src[0]
            here, there = _view_base(n.src[0]).src[1].arg, _view_base(w.src[0]).src[1].arg
            if n.src[0].tensor_shape == w.src[0].tensor_shape and n.src[1].src[1].arg == here and _peer(here, there):
                self.mirrors.setdefault(w, []).append(n)
                self.mirrored[n] = w

    # ---- lowering: tensor node at these indices -> kernel value ------------------------------------------

    def _lower(self, k: Kernel, u: UOp, idxs: tuple[UOp, ...], valid: UOp | None,
               reducing: tuple[Reduction, ...]) -> Call[UOp]:
        # `reducing` (the enclosing reductions, outermost first) only informs the realize decisions: it is not
        # part of the key, so a subexpression met inside and outside a reduction is lowered (and computed) once
        key = (u, idxs, valid)
        got = k.memo.get(key)
        if got is None:
            got = k.memo[key] = yield self._lower_uncached(k, u, idxs, valid, reducing)
        return got

    def _lower_uncached(self, k: Kernel, u: UOp, idxs: tuple[UOp, ...], valid: UOp | None,
                        reducing: tuple[Reduction, ...]) -> Call[UOp]:
        op = u.op
        if op is Ops.BUFFER:
            return k.param(u).index(idxs[0], valid).load() if valid is not None else k.param(u).index(idxs[0]).load()
        if op is Ops.ASSIGN:
            # the written buffer, read through the destination view
            yield self._realize(u)
            return (yield self._lower(k, u.src[0], idxs, valid, reducing))
        if op is Ops.COPY and u not in self.realized and _peer(k.params[0].src[1].arg, u.src[0].device):
            return (yield self._read_in_place(k, u.src[0], idxs, valid, reducing))
        if u in self.realized or op in (Ops.CONTIGUOUS, Ops.COPY) or \
                (op in GroupOp.Elementwise and reducing and self._worth_realizing(u, idxs, reducing)):
            return (yield self._load_realized(k, u, idxs, valid, reducing))
        if op is Ops.CONST:
            return u
        if op is Ops.ARANGE:
            return idxs[0].cast(u.dtype)
        if op is Ops.DEFINE_VAR:
            return u
        if op is Ops.BIND:
            return u.src[0]
        if op is Ops.AFTER:
            yield self._realize_effects(u)
            return (yield self._lower(k, u.src[0], idxs, valid, reducing))
        if op is Ops.DETACH:
            return (yield self._lower(k, u.src[0], idxs, valid, reducing))
        if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
            srcs = []
            for s in u.src:
                srcs.append((yield self._lower(k, s, idxs, valid, reducing)))
            return UOp(op, u.dtype, tuple(srcs), u.arg)
        unsupported = f"the scheduler cannot lower {op} yet ({u.render()[:80]})"
        if not u.src:  # every op below has a source
            raise NotImplementedError(unsupported)
        src = u.src[0]
        if op is Ops.RESHAPE:
            # simplified right away: `(r0*2+r1)//2` with r1 < 2 is just r0, and decisions below look at the
            # ranges an index really depends on
            new = reshape_index(idxs, u.tensor_shape, src.tensor_shape)
            return (yield self._lower(k, src, new, valid, reducing))
        if op is Ops.EXPAND:
            new = tuple(_ZERO if s == 1 and n != 1 else i for i, s, n in zip(idxs, src.tensor_shape, u.tensor_shape))
            return (yield self._lower(k, src, new, valid, reducing))
        if op is Ops.PERMUTE:
            moved = list(idxs)  # every position is overwritten: the arg is a permutation
            for i, axis in enumerate(u.arg):
                moved[axis] = idxs[i]
            return (yield self._lower(k, src, tuple(moved), valid, reducing))
        if op is Ops.SHRINK:
            return (yield self._lower(k, src, tuple(i + s if _nonzero(s) else i for i, (s, _) in zip(idxs, u.arg)), valid,
                                      reducing))
        if op is Ops.FLIP:
            flipped = tuple((n - 1) - i if f else i for i, f, n in zip(idxs, u.arg, u.tensor_shape))
            return (yield self._lower(k, src, flipped, valid, reducing))
        if op is Ops.PAD:
            return (yield self._lower_pad(k, u, idxs, valid, reducing))
        if op is Ops.REDUCE_AXIS:
            return (yield self._lower_reduce(k, u, idxs, valid, reducing))
        raise NotImplementedError(unsupported)

    def _read_in_place(self, k: Kernel, src: UOp, idxs, valid, reducing) -> Call[UOp]:
        """The source of a COPY between devices sharing memory, read by this kernel where it is: a view of storage
        through its view ops; anything else realized once on its own device (the work stays where it was put, and
        every reader shares that one result) and loaded from there."""
        if _over_storage(src):
            return (yield self._lower(k, src, idxs, valid, reducing))
        buf = yield self._realize(src)
        return (yield self._lower(k, buf, (flat_index(idxs, src.tensor_shape),), valid, reducing))

    def _load_realized(self, k: Kernel, u: UOp, idxs, valid, reducing) -> Call[UOp]:
        """`u` realized into its own buffer (scheduled now if it is not yet), loaded at `idxs`. A value that
        reads no buffer (a reduction of constants) is computed on the device of the kernel that loads it."""
        buf = yield self._realize(u, k.params[0].device)
        return (yield self._lower(k, buf, (flat_index(idxs, u.tensor_shape),), valid, reducing))

    def _worth_realizing(self, u: UOp, idxs: tuple[UOp, ...], reducing: tuple[Reduction, ...]) -> bool:
        """Whether elementwise `u`, lowered at `idxs` inside `reducing`, is better computed once into a buffer.
        The innermost reduction whose ranges it uses computes each of its elements once per combination of
        the body's other ranges (`reads` times). It is realized when that is at least REALIZE_READS times and
        it costs more than a load, or when it is read more than once and is the epilogue of a reduction of
        its own size: that reduction would be realized on its own anyway (see `_lower_reduce`), so its
        epilogue joins it at no extra kernel (the last layer of an MLP does not redo the previous one's bias
        and relu per output)."""
        used = _ranges_of(idxs)
        red = next((red for red in reversed(reducing) if any(r in used for r in red.ranges)), None)
        if red is None:
            return False  # it does not vary inside any reduction: codegen computes it outside the loops
        reads = prod(int(r.src[0].vmax) for r in red.body if r not in used)  # a symbolic range: its largest size
        if reads <= 1:
            return False
        inside = self._computed(u)
        if inside is None or _one_hot(inside):
            return False
        if any(n.op is Ops.REDUCE_AXIS and n.numel == u.numel for n in inside):
            return True
        return reads >= REALIZE_READS and any(n.op in GroupOp.ALU or n.op is Ops.REDUCE_AXIS for n in inside)

    def _computed(self, u: UOp) -> list[UOp] | None:
        """The tensor nodes a kernel computing `u` would compute rather than load (None when it would load
        nothing: index math and constants, which stay inlined)."""
        def computed(n: UOp) -> bool:
            return n not in self.realized and n.op not in _LOADED
        nodes = u.toposort(gate=computed)
        inside = [n for n in nodes if computed(n)]
        return inside if len(inside) < len(nodes) else None

    def _lower_pad(self, k: Kernel, u: UOp, idxs, valid, reducing) -> Call[UOp]:
        src = u.src[0]
        conds, new = [], []
        for i, (b, a), n in zip(idxs, u.arg, src.tensor_shape):
            new.append(i - b if _nonzero(b) else i)
            if _nonzero(b):
                conds.append(i >= b)
            if _nonzero(a):
                conds.append(i < b + n)
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        gate = cond if valid is None else valid & cond
        inner = yield self._lower(k, src, tuple(new), gate, reducing)
        # the gate keeps the loads in bounds; the WHERE makes the padding zero for any op above them (exp(0) != 0)
        return cond.where(inner, UOp.const(u.dtype, 0))

    def _lower_reduce(self, k: Kernel, u: UOp, idxs, valid, reducing) -> Call[UOp]:
        src = u.src[0]
        op, axes = u.arg
        # a reduction of nothing is its identity (a sum of nothing is 0)
        if any(src.tensor_shape[a] == 0 for a in axes):
            return UOp.const(u.dtype, _IDENTITY[op](u.dtype))
        if any(r in red.ranges for red in reducing for i in idxs for r in i.ranges) and \
                any(r not in _ranges_of(idxs) for r in k.output_ranges):
            # inlined here it would be recomputed for every value of an output range it does not use
            return (yield self._load_realized(k, u, idxs, valid, reducing))
        new_ranges = []
        src_idxs = list(idxs)
        for a in axes:
            n = src.tensor_shape[a]
            if _many(n):
                r = k.new_range(n, AxisType.REDUCE)
                new_ranges.append(r)
                src_idxs[a] = r
            else:
                src_idxs[a] = _ZERO
        inner = yield self._lower(k, src, tuple(src_idxs), valid,
                                  reducing + (Reduction(tuple(new_ranges), frozenset(new_ranges) | _ranges_of(idxs)),))
        if not new_ranges:
            return inner
        if op is Ops.ADD and (picked := _fold_one_hot(inner, new_ranges)) is not None:
            return picked
        return UOp(Ops.REDUCE, u.dtype, (inner, *new_ranges), op)


def _fold_one_hot(inner: UOp, ranges: list[UOp]) -> UOp | None:
    """A sum over `ranges` of where(r == v and ..., x, 0), with each v independent of the ranges, is x at
    r = v (zero when v is outside the range): a gather through a one-hot mask becomes one load instead of a
    loop over the whole axis. The loads that now depend on v are gated by v being in range."""
    casts = []
    w = inner
    while w.op is Ops.CAST:
        casts.append(w.dtype)
        w = w.src[0]
    if w.op is not Ops.WHERE or w.src[2].op is not Ops.CONST or w.src[2].arg != 0:
        return None
    binding: dict[UOp, UOp] = {}
    rest: list[UOp] = []
    for c in _conjuncts(w.src[0]):
        got = _range_equals(c, ranges)
        if got is not None and got[0] not in binding:
            binding[got[0]] = got[1]
        else:
            rest.append(c)
    if len(binding) != len(ranges):
        return None
    sub = {r: v.cast(dtypes.weakint) for r, v in binding.items()}
    # in range: one condition per bound range (there is at least one: `ranges` is not empty)
    conds = [(vi >= 0) & (vi < r.src[0]) for r, vi in sub.items()]
    valid = conds[0]
    for c in conds[1:]:
        valid = valid & c
    x = w.src[1].substitute(sub)
    gated = {n: UOp(Ops.INDEX, n.dtype, (n.src[0], n.src[1], valid if len(n.src) < 3 else n.src[2] & valid))
             for n in x.toposort() if n.op is Ops.INDEX and any(vi in n.toposort() for vi in sub.values())}
    x = x.substitute(gated) if gated else x
    cond = valid
    for c in rest:
        cond = cond & c.substitute(sub)
    out = cond.where(x, w.src[2])
    for dt in reversed(casts):
        out = out.cast(dt)
    return out


def _conjuncts(c: UOp) -> list[UOp]:
    """The terms of a chain of boolean ANDs, left to right (a stack: nested pads make long chains)."""
    out, stack = [], [c]
    while stack:
        n = stack.pop()
        if n.op is Ops.AND and n.dtype is dtypes.bool:
            stack += (n.src[1], n.src[0])
        else:
            out.append(n)
    return out


def _range_equals(c: UOp, ranges: list[UOp]) -> tuple[UOp, UOp] | None:
    """(r, v) when `c` is r == v for one of `ranges` (through int casts wide enough to keep r exact) and
    the int value v depends on none of them."""
    if c.op is not Ops.CMPEQ:
        return None
    for a, v in (c.src, c.src[::-1]):
        while a.op is Ops.CAST and dtypes.is_int(a.dtype) and a.src[0].op in (Ops.CAST, Ops.RANGE):
            r = a.src[0]
            while r.op is Ops.CAST:
                r = r.src[0]
            if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST or dtypes.max(a.dtype) < r.src[0].arg - 1:
                break
            a = a.src[0]
        if a in ranges and dtypes.is_int(v.dtype) and not any(r in v.ranges for r in ranges):
            return a, v
    return None


# the value of a reduction over no elements
_IDENTITY = {Ops.ADD: lambda dt: 0, Ops.MUL: lambda dt: 1, Ops.MAX: dtypes.min}

# tensor nodes a kernel reads from memory instead of computing
_LOADED = frozenset({Ops.BUFFER, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN})


def _one_hot(nodes: list[UOp]) -> bool:
    """Whether `nodes` compare the element index for equality: a one-hot mask, which stays inlined so that
    `_fold_one_hot` can turn the reduction over it into a gated load."""
    def strip(n: UOp) -> UOp:
        while n.op in GroupOp.Movement or n.op in (Ops.CAST, Ops.BITCAST):
            n = n.src[0]
        return n
    return any(n.op is Ops.CMPEQ and any(strip(s).op is Ops.ARANGE for s in n.src) for n in nodes)


def _ranges_of(idxs: tuple[UOp, ...]) -> set[UOp]:
    out: set[UOp] = set()
    for i in idxs:
        out.update(i.ranges)
    return out


def _buffer_view(u: UOp) -> UOp | None:
    """A realized buffer seen in its full shape (RESHAPE of a BUFFER) needs no kernel."""
    if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER:
        return u.src[0]
    return None


def _shares_memory(kernel_device: str, device: str | None) -> bool:
    """Whether a kernel on `kernel_device` may read a buffer of `device` in place (device.shares_memory)."""
    if device is None or device == kernel_device:
        return device is not None
    from tg_core.device import shares_memory  # the scheduler needs no device otherwise
    return shares_memory(kernel_device, device)


def _peer(kernel_device: str, device: str | None) -> bool:
    """Whether `device` is another device whose buffers a kernel on `kernel_device` reads in place (a COPY within
    one device stays a copy: it is a snapshot of what the buffer holds)."""
    return device is not None and device != kernel_device and _shares_memory(kernel_device, device)


def _over_storage(u: UOp) -> bool:
    """A chain of movement ops over storage (a BUFFER, or one written by ASSIGN/AFTER): reading it is loads."""
    while u.op in GroupOp.Movement or u.op is Ops.DETACH:
        u = u.src[0]
    return u.op in (Ops.BUFFER, Ops.ASSIGN, Ops.AFTER)


def _view_base(u: UOp) -> UOp:
    """The BUFFER under a chain of movement ops and DETACH."""
    while u.op is not Ops.BUFFER:
        if u.op not in GroupOp.Movement and u.op is not Ops.DETACH:
            raise ValueError(f"cannot assign to {u.op}: the destination of an assign is a view of a buffer")
        u = u.src[0]
    return u


def _kernel_name(u: UOp) -> str:
    ops = [n.op.name.lower() for n in u.toposort(gate=lambda n: n.op is not Ops.BUFFER)
           if n.op in GroupOp.ALU or n.op is Ops.REDUCE_AXIS]
    short = "_".join(dict.fromkeys(ops))[:40]
    return short or u.op.name.lower()


def create_schedule(targets: list[UOp], devices: Sequence[str | None] | None = None
                    ) -> tuple[list[tuple[UOp, list[UOp]]], dict[UOp, UOp]]:
    """Kernels (AST, BUFFER nodes by PARAM index) that compute `targets`, in dependency order, and each
    target's BUFFER. `devices[i]` is where targets[i] goes when its graph reads no buffer."""
    s = Scheduler()
    s.find_mirrors(targets)
    # writes last, so that every other target reads what the buffers held before them (and a write's value
    # that uses another target loads it instead of computing it again)
    writes = [i for i, t in enumerate(targets) if t.op is Ops.ASSIGN]
    out = {}
    for i, t in enumerate(targets):
        if t.op is not Ops.ASSIGN:
            out[t] = s.realize(t, devices[i] if devices else None)
    s.prepare_writes([targets[i] for i in writes])
    for i in writes:
        out[targets[i]] = s.realize(targets[i], devices[i] if devices else None)
    return s.items, out


__all__ = ["create_schedule", "flat_index", "strides_for", "unflatten"]
