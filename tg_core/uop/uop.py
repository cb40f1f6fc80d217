"""UOp: the one node type of the IR.

A UOp is immutable and hash-consed: constructing `UOp(op, dtype, src, arg, tag)` twice gives the same
object, so graphs compare by identity, dictionaries keyed by UOps are cheap, and rewriting is
functional. The cache holds nodes weakly; a graph nobody references is freed.

Immutability is a contract, not enforced: the fields are plain slots because a `__setattr__` guard
doubles the cost of creating a node. Use `.replace(...)` to get a changed node; never assign a field.

Node equality is identity. Arithmetic operators build new nodes (`x + 1`), so `==` is not overloaded:
use `.eq()` / `.ne()` for the comparison ops.
"""
from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from tg_core.dtype import ConstType, DType, PtrDType, as_const, dtypes, least_upper_dtype
from tg_core.uop.ops import AxisType, GroupOp, Ops
from tg_core.uop.tensor_ops import Shape, TensorOps, _NoShape

# The hash-consing cache: key -> weak reference to the node. Entries of dead nodes are swept when the
# cache has doubled since the last sweep (amortized O(1) per node, and cheaper than a weakref callback
# per node). Lookups that hit a live node take no lock: a live entry is never removed. A new key is
# inserted with one atomic setdefault; replacing a dead entry and sweeping hold the lock, so two threads
# building the same node always end with the same object.
# The floor is small: a compile makes and drops tens of thousands of nodes, and dead entries kept until a floor
# of 65536 (with the dict slots they hold) left ~7-13 MB of SmolLM2's peak in Python arenas that then stay
# fragmented; a sweep still costs at most two entry checks per insertion.
_ucache: dict[tuple, weakref.ref] = {}
_ucache_lock = threading.Lock()
_SWEEP_FLOOR = 1 << 12
_sweep_at = _SWEEP_FLOOR


def _sweep_dead() -> None:
    """Drop the entries of dead nodes (keys hold no nodes, so a dead entry costs only its own memory). Under the
    lock, so that no replacement of a dead entry by a live node happens between the test and the deletion;
    insertions of new keys go on meanwhile. The dict is copied first by `dict.copy`, which allocates no
    GC-tracked object while it copies; `list(d.items())` makes a tuple per item, and a collection those
    allocations start can run finalizers that switch threads mid-copy ("dictionary changed size")."""
    global _sweep_at
    with _ucache_lock:
        for key, ref in _ucache.copy().items():
            if ref() is None and _ucache.get(key) is ref:
                del _ucache[key]
        _sweep_at = max(_SWEEP_FLOOR, 2 * len(_ucache))


def _replace_dead(key: tuple, node: UOp, new: weakref.ref) -> UOp:
    """The entry for `key` holds a node: the live one it names, or, when that died, `node`, which replaces it."""
    with _ucache_lock:
        ref = _ucache.get(key)
        other = ref() if ref is not None else None
        if other is not None:
            return other  # another thread made it first
        _ucache[key] = new
    return node


# what the hot constructors test, as module constants: on Python 3.11 `Ops.X` and `AxisType.X` go through
# EnumType's __getattr__ hook (about 150 ns each, several times a global lookup)
_CONST, _RANGE = Ops.CONST, Ops.RANGE
_WEAKINT, _BOOL = dtypes.weakint, dtypes.bool

_IDENTITY_HASH: Any = object.__hash__  # the hash of types whose equality is identity
_BY_ADDRESS = object()             # marks an arg keyed by address (no real arg is this object)


def _arg_key(arg: Any) -> Any:
    """Floats key by their bits so that 0.0 and -0.0 stay distinct and NaN constants are shared; bools key
    apart from ints (True == 1 in Python, but a node's arg must be what its builder gave)."""
    if type(arg) is float:
        return (float, arg.hex())
    if type(arg) is bool:
        return (bool, arg)
    if type(arg) is tuple:
        for a in arg:  # a loop, not any(): a RANGE's (axis, kind) is keyed once per loop index built
            ta = type(a)
            if ta is float or ta is bool:
                return (tuple, tuple([_arg_key(a) for a in arg]))
    return arg


def _bottom_up(root: UOp, slot: str, compute: Callable[[UOp], Any]) -> Any:
    """Fill a lazily computed per-node slot for `root` and every descendant missing it, without recursion
    (index expressions can be thousands of nodes deep)."""
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if getattr(node, slot) is not None:
            continue
        if ready:
            setattr(node, slot, compute(node))
            continue
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if getattr(s, slot) is None)
    return getattr(root, slot)


def _binop(op: Ops, reverse: bool = False) -> Callable[[UOp, Any], UOp]:
    """An operator method. Graph building is dominated by operators, so the two common cases (an operand
    of the same scalar dtype, and a Python int meeting index math) build the node directly; everything
    else goes through promotion in `UOp._binary`."""
    comparison = op in GroupOp.Comparison

    def method(self: UOp, x: Any) -> UOp:
        dt = self.dtype
        if dt.count == 1:
            if type(x) is UOp:
                other = x if x.dtype is dt else None
            elif type(x) is int and dt is _WEAKINT:
                other = UOp(_CONST, dt, (), x)
            else:
                other = None
            if other is not None:
                return UOp(op, _BOOL if comparison else dt, (other, self) if reverse else (self, other))
        return self._binary(op, x, reverse)
    method.__name__ = f"__{'r' if reverse else ''}{op.name.lower()}__"
    return method


def _not_a_dtype(ctor: str, dtype: object, other: object) -> None:
    """The error for a constructor whose dtype argument is not a DType, naming tg's argument order (tinygrad
    code and habit put the value first: `UOp.const(3, dtypes.int)` is `UOp.const(dtypes.int, 3)` here)."""
    order = "(dtype, value)" if ctor == "const" else "(index, dtype, name=None)"
    hint = f"; write UOp.{ctor}({other!r}, {dtype!r})" if ctor == "const" and isinstance(other, DType) else ""
    raise TypeError(f"UOp.{ctor} takes {order}: its dtype argument is {dtype!r}, not a DType{hint}")


class UOp(TensorOps):
    """One node: `op` applied to `src` nodes, producing `dtype`, parametrized by `arg`; `tag` is free for passes."""
    # _minmax, _ranges: lazily computed analyses; _lin: the linear form of a canonical integer sum (set by
    # the code that builds one, see linear.py). All are pure functions of the node, so caching them on a
    # shared hash-consed node is safe.
    __slots__ = ("op", "dtype", "src", "arg", "tag", "_minmax", "_ranges", "_lin", "_shape", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    # None until computed (or, for _lin, until a builder records it)
    _minmax: tuple[ConstType, ConstType] | None
    _ranges: dict[UOp, None] | None
    _lin: tuple[dict[UOp, int], int] | tuple[None, None] | None
    _shape: Shape | _NoShape | None

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        # sources by address: a key must not keep them alive (a dead node's entry would otherwise hold its
        # whole graph, and the device memory of its buffers, until the next sweep). Addresses are unique
        # while the entry's node lives, since it holds its sources; a dead entry is only ever replaced.
        # Args compared by identity (hcq's Mem holding a device Buffer, functions) key by address for the
        # same reason: an eager AMD loop otherwise kept every step's buffers alive until the sweep.
        if arg is None:
            akey = None
        else:
            targ = type(arg)
            if targ is int or targ is str:  # the common args (constants, names) key as themselves
                akey = arg
            elif targ is float or targ is tuple or targ is bool:
                akey = _arg_key(arg)
            elif targ.__hash__ is _IDENTITY_HASH:
                akey = (_BY_ADDRESS, id(arg))
            else:
                akey = arg
        # one flat tuple, the sources' addresses last (their count is the key's length less 4): most nodes have
        # one or two sources, and writing those out is 2.5x cheaper than map(); no inner tuple to build or hash
        n = len(src)
        key = (op, dtype, akey, tag, id(src[0]), id(src[1])) if n == 2 else (op, dtype, akey, tag, id(src[0])) \
            if n == 1 else (op, dtype, akey, tag) if n == 0 else (op, dtype, akey, tag, *map(id, src))
        ref = _ucache.get(key)
        if ref is not None:
            node = ref()
            if node is not None:
                return node
        node = object.__new__(cls)
        node.op = op
        node.dtype = dtype
        node.src = src
        node.arg = arg
        node.tag = tag
        node._minmax = node._ranges = node._lin = node._shape = None
        new = weakref.ref(node)
        if ref is None:
            # a new key: setdefault inserts it atomically (no lock: it never replaces an entry, so it cannot
            # race the sweep or a replacement, which hold the lock); if another thread inserted first, its node
            # is the one (or, had that one died already, the entry is replaced as below)
            ref = _ucache.setdefault(key, new)
            if ref is new:
                if len(_ucache) > _sweep_at:
                    _sweep_dead()
                return node
        return _replace_dead(key, node, new)

    def __reduce__(self) -> tuple:
        # the graph as a flat table, sources by position: pickling the nested sources would recurse once per
        # level of the graph (tensor graphs are thousands of nodes deep)
        order = list(self.toposort())
        pos = {u: i for i, u in enumerate(order)}
        return _unpickle, ([(u.op, u.dtype, tuple(pos[s] for s in u.src), u.arg, u.tag) for u in order],)

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of a UOp is not known until it runs ({self.render()}); "
                        "compare with .vmin/.vmax or simplify() it to a constant first")

    # ---- structure ------------------------------------------------------------------------------------

    def replace(self, **kwargs: Any) -> UOp:
        """A copy with some of op/dtype/src/arg/tag changed."""
        bad = set(kwargs) - {"op", "dtype", "src", "arg", "tag"}
        if bad:
            raise TypeError(f"replace() got unknown fields {sorted(bad)}; allowed: op, dtype, src, arg, tag")
        return UOp(kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), kwargs.get("src", self.src),
                   kwargs.get("arg", self.arg), kwargs.get("tag", self.tag))

    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
        """Every node reachable from this one, each after its sources (an ordered set). With `gate`, the
        search does not descend below nodes for which gate returns False (they are still included)."""
        # the hottest walk in codegen: a depth-first walk holding the current path, each entry a node and an
        # iterator over its sources; a node is emitted when its iterator runs out. Resuming the iterator
        # replaces pushing every source (and a marker per node) ahead of time: 1.8x faster on large graphs,
        # with the same order (each node after its sources, sources visited in order).
        out: dict[UOp, None] = {}
        empty: tuple = ()
        stack = [(self, iter(self.src if gate is None or gate(self) else empty))]
        push, pop = stack.append, stack.pop
        while stack:
            node, it = stack[-1]
            for s in it:
                if s not in out:
                    push((s, iter(s.src if gate is None or gate(s) else empty)))
                    break
            else:
                pop()
                out[node] = None
        return out

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """This graph with each key of `mapping` replaced by its value (replacements are not searched again)."""
        from tg_core.uop.rewrite import substitute
        return substitute(self, mapping)

    @property
    def ptrdtype(self) -> PtrDType:
        """The dtype of a buffer node (PARAM, DEFINE_REG, DEFINE_LOCAL, INDEX) as the pointer it is: its size
        and address space. A value node is a TypeError naming its op and dtype."""
        dt = self.dtype
        if not isinstance(dt, PtrDType):
            raise TypeError(f"{self.op} has the value dtype {dt!r}, not a pointer: it is not a buffer")
        return dt

    def sink(self, *srcs: UOp) -> UOp:
        return UOp(Ops.SINK, dtypes.void, (self, *srcs))

    @property
    def ranges(self) -> dict[UOp, None]:
        """The RANGEs this value is computed inside of: those its sources depend on and have not ended."""
        r = self._ranges
        return r if r is not None else _bottom_up(self, "_ranges", _compute_ranges)

    # ---- constructors ---------------------------------------------------------------------------------

    @staticmethod
    def const(dtype: DType, value: ConstType | tuple[ConstType, ...]) -> UOp:
        """A constant of `dtype`; a tuple value makes a vector constant with one value per lane."""
        if dtype is _WEAKINT and type(value) is int:
            return UOp(_CONST, dtype, (), value)  # index math's constants: nothing to check or convert
        if not isinstance(dtype, DType):
            _not_a_dtype("const", dtype, value)
        if isinstance(value, UOp):
            raise TypeError(f"UOp.const takes a Python value, got the UOp {value.render()}")
        if isinstance(value, tuple):
            if len(value) != dtype.count:
                raise ValueError(f"a vector constant of {dtype!r} needs {dtype.count} values, got {len(value)}")
            return UOp(Ops.VCONST, dtype, (), tuple(as_const(v, dtype.scalar()) for v in value))
        if isinstance(dtype, PtrDType) or dtype is dtypes.void:
            raise TypeError(f"no constant of {dtype!r}")
        return UOp(Ops.CONST, dtype, (), as_const(value, dtype.scalar()))

    @staticmethod
    def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.weakint) -> UOp:
        """A symbolic value known only to lie in [min_val, max_val]."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a variable needs a non-empty string name, got {name!r}")
        if min_val > max_val:
            raise ValueError(f"variable {name}: min {min_val} is greater than max {max_val}")
        lo, hi = dtypes.min(dtype), dtypes.max(dtype)
        if min_val < lo or max_val > hi:
            raise ValueError(f"variable {name}: bounds [{min_val}, {max_val}] exceed {dtype!r}'s range [{lo}, {hi}]")
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))

    @staticmethod
    def range(end: UOp | int, axis_id: int | tuple, kind: AxisType = AxisType.LOOP, dtype: DType = dtypes.weakint) -> UOp:
        """A loop index taking the values 0, 1, ..., end-1."""
        end_uop = end if isinstance(end, UOp) else UOp.const(dtype, end)
        return UOp(_RANGE, dtype, (end_uop,), (axis_id, kind))

    @staticmethod
    def param(index: int, dtype: DType, name: str | None = None, *, shape: Any = None) -> UOp:
        """A numbered placeholder: a kernel argument or a function input. A buffer argument's dtype is a
        pointer (`dtypes.int.ptr(16)`); tinygrad's shape argument (`UOp.param(0, dtypes.int, 16)`, `shape=`)
        is an error naming that spelling, where it would otherwise name a scalar param "16"."""
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"UOp.param(index, dtype, name=None): the index is an int, got {index!r} (tinygrad's "
                            f"placeholder(shape, dtype, slot) is UOp.param(slot, dtype.ptr(prod(shape))) here)")
        if not isinstance(dtype, DType):
            _not_a_dtype("param", dtype, index)
        size = shape if shape is not None else name if name is not None and not isinstance(name, str) else None
        if size is not None:
            n = size if isinstance(size, int) else math.prod(size) if isinstance(size, (tuple, list)) else None
            spelled = f"UOp.param({index}, {dtype!r}.ptr({n}))" if isinstance(n, int) else \
                f"UOp.param({index}, {dtype!r}.ptr(size))"
            raise TypeError(f"UOp.param(index, dtype, name=None) takes no shape (tinygrad's third argument), got "
                            f"{size!r}: a buffer of n elements is a pointer dtype, {spelled}; name must be a str")
        return UOp(Ops.PARAM, dtype, (), index if name is None else (index, name))

    placeholder = param

    @staticmethod
    def special(size: UOp | int, name: str, dtype: DType = dtypes.weakint) -> UOp:
        return UOp(Ops.SPECIAL, dtype, (size if isinstance(size, UOp) else UOp.const(dtype, size),), name)

    def const_like(self, value: ConstType) -> UOp:
        return UOp.const(self.dtype, value)

    def bind(self, value: int) -> UOp:
        """This variable with a value: a BIND (a symbolic int whose kernels take the value at run time)."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only a variable can be bound, not {self.op}")
        name, lo, hi = self.arg
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            # a float would be truncated into an int variable: a silently different size or position
            raise TypeError(f"cannot bind {name} to {value!r} ({type(value).__name__}): a variable takes an int in "
                            f"[{lo}, {hi}]")
        value = int(value)
        if not lo <= value <= hi:
            raise ValueError(f"cannot bind {name}={value}: outside its range [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def unbind(self) -> tuple[UOp, int]:
        """A bound variable's (DEFINE_VAR, value): tinygrad's `unbind`."""
        if self.op is not Ops.BIND:
            raise TypeError(f"only a bound variable (UOp.variable(...).bind(v)) can be unbound, not {self.op}")
        return self.src[0], int(self.src[1].arg)

    # ---- ALU constructors and operators -----------------------------------------------------------------

    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        """`op` applied to this node and `srcs`; comparisons give bool."""
        dtype = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else self.dtype
        if op is Ops.WHERE:
            dtype = srcs[0].dtype
        return UOp(op, dtype, (self, *srcs))

    def _operand(self, x: UOp | ConstType) -> UOp:
        if isinstance(x, UOp):
            return x
        if isinstance(x, (bool, int, float)):
            # a Python scalar is weak: _promote gives it this node's dtype, except that a float meeting an
            # int gives the default float (int32 + 2.5 is float32, not int32 + 2)
            return UOp.const(dtypes.from_py(x), x)
        raise TypeError(f"cannot combine a UOp with {type(x).__name__} {x!r}")

    def _binary(self, op: Ops, x: UOp | ConstType, reverse: bool = False) -> UOp:
        other = self._operand(x)
        a, b = (other, self) if reverse else (self, other)
        if a.dtype != b.dtype:
            a, b = _promote(a, b, op)
        return a.alu(op, b)

    def _sub(self, x: UOp | ConstType, reverse: bool) -> UOp:
        # promote before negating: NEG of a bool is logical not, so in bool - 1 the bool must become int first
        other = self._operand(x)
        a, b = (other, self) if reverse else (self, other)
        if a.dtype != b.dtype:
            a, b = _promote(a, b, Ops.ADD)
        if dtypes.is_bool(b.dtype):
            raise TypeError("subtracting bools is not supported (as in PyTorch); use logical_not() or ^")
        return a + (-b)

    __add__, __radd__ = _binop(Ops.ADD), _binop(Ops.ADD, True)
    __mul__, __rmul__ = _binop(Ops.MUL), _binop(Ops.MUL, True)
    __floordiv__, __rfloordiv__ = _binop(Ops.IDIV), _binop(Ops.IDIV, True)  # truncating, as in C
    __mod__, __rmod__ = _binop(Ops.MOD), _binop(Ops.MOD, True)              # sign of the dividend, as in C
    __truediv__, __rtruediv__ = _binop(Ops.FDIV), _binop(Ops.FDIV, True)
    __and__, __rand__ = _binop(Ops.AND), _binop(Ops.AND, True)
    __or__, __ror__ = _binop(Ops.OR), _binop(Ops.OR, True)
    __xor__, __rxor__ = _binop(Ops.XOR), _binop(Ops.XOR, True)
    __lshift__, __rshift__, __pow__ = _binop(Ops.SHL), _binop(Ops.SHR), _binop(Ops.POW)
    __lt__, __gt__ = _binop(Ops.CMPLT), _binop(Ops.CMPLT, True)

    def __sub__(self, x): return self._sub(x, False)
    def __rsub__(self, x): return self._sub(x, True)

    def __le__(self, x):
        other = self._operand(x)
        if dtypes.is_float(self.dtype) or dtypes.is_float(other.dtype):
            return (self < other) | self.eq(other)  # stays false for NaN, unlike not(other < self)
        return (other < self).logical_not()

    def __ge__(self, x):
        return self._operand(x) <= self

    def __neg__(self):
        if dtypes.is_bool(self.dtype):
            return self.logical_not()
        return self * -1

    def __invert__(self):
        if dtypes.is_bool(self.dtype):
            return self.logical_not()
        return self ^ -1

    def ne(self, x: UOp | ConstType) -> UOp: return self._binary(Ops.CMPNE, x)
    def eq(self, x: UOp | ConstType) -> UOp: return self._binary(Ops.CMPEQ, x)
    def logical_not(self) -> UOp: return self.ne(True)
    def maximum(self, x: UOp | ConstType) -> UOp: return self._binary(Ops.MAX, x)

    def minimum(self, x: UOp | ConstType) -> UOp:
        other = self._operand(x)
        return (self < other).where(self, other)

    def where(self, x: UOp | ConstType, y: UOp | ConstType) -> UOp:
        # a Python scalar branch is weak, as in arithmetic: where(c, int32, 2.5) is the default float
        if isinstance(x, UOp):
            a, b = x, (y if isinstance(y, UOp) else x._operand(y))
        elif isinstance(y, UOp):
            a, b = y._operand(x), y
        else:
            dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
            a, b = UOp.const(dt, x), UOp.const(dt, y)
        if a.dtype != b.dtype:
            a, b = _promote(a, b, Ops.WHERE)
        return UOp(Ops.WHERE, a.dtype, (self, a, b))

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        if dtype.nbytes != self.dtype.nbytes:
            raise ValueError(f"bitcast from {self.dtype!r} to {dtype!r} changes the size "
                             f"({self.dtype.nbytes} != {dtype.nbytes} bytes)")
        return UOp(Ops.BITCAST, dtype, (self,))

    def exp2(self) -> UOp: return self.alu(Ops.EXP2)
    def log2(self) -> UOp: return self.alu(Ops.LOG2)
    def sin(self) -> UOp: return self.alu(Ops.SIN)
    def sqrt(self) -> UOp: return self.alu(Ops.SQRT)
    def reciprocal(self) -> UOp: return self.alu(Ops.RECIPROCAL)
    def trunc(self) -> UOp: return self.alu(Ops.TRUNC)

    # ---- memory and control ----------------------------------------------------------------------------

    def index(self, idx: UOp, valid: UOp | None = None) -> UOp:
        return UOp(Ops.INDEX, self.dtype, (self, idx) if valid is None else (self, idx, valid))

    def load(self, *srcs: UOp, dtype: DType | None = None) -> UOp:
        return UOp(Ops.LOAD, dtype or self.dtype.base, (self, *srcs))

    def store(self, value: UOp) -> UOp:
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def end(self, *ranges: UOp) -> UOp:
        return UOp(Ops.END, dtypes.void, (self, *ranges)) if ranges else self

    def reduce(self, op: Ops, *ranges: UOp) -> UOp:
        return UOp(Ops.REDUCE, self.dtype, (self, *ranges), op)

    def after(self, *effects: UOp) -> UOp:
        return UOp(Ops.AFTER, self.dtype, (self, *effects))

    # ---- analysis ---------------------------------------------------------------------------------------

    @property
    def vmin(self) -> ConstType:
        """A lower bound on every value this node takes."""
        mm = self._minmax
        return (mm if mm is not None else self._compute_minmax())[0]

    @property
    def vmax(self) -> ConstType:
        """An upper bound on every value this node takes."""
        mm = self._minmax
        return (mm if mm is not None else self._compute_minmax())[1]

    def _compute_minmax(self) -> tuple[ConstType, ConstType]:
        return _fill_minmax(self)

    def const_factor(self) -> int:
        """The largest integer known to divide this index expression."""
        if self.op is Ops.CONST:
            return self.arg
        if self.op is Ops.MUL and self.src[1].op is Ops.CONST:
            return self.src[1].arg
        if self.op is Ops.ADD:
            return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
        return 1

    def simplify(self) -> UOp:
        """This expression with the symbolic rules applied until nothing changes."""
        from tg_core.uop.symbolic import simplify
        return simplify(self)

    def variables(self) -> list[UOp]:
        """The DEFINE_VARs this expression uses, sorted by name."""
        return sorted((u for u in self.toposort() if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])

    def evaluate(self, env: Mapping[UOp, ConstType] | None = None) -> ConstType:
        """The value of this expression with variables (and loop indices) given by `env`."""
        from tg_core.uop.evaluate import evaluate
        return evaluate(self, env or {})

    # ---- printing ---------------------------------------------------------------------------------------

    def render(self) -> str:
        """This expression as readable text, e.g. `((x*4)+3)`."""
        from tg_core.uop.printer import render
        return render(self)

    def __repr__(self) -> str:
        from tg_core.uop.printer import pretty
        if self.op in _SINT_OPS and dtypes.is_int(self.dtype) and _is_bound_sint(self):
            # a symbolic dim of a tensor's shape (sint.py): one line, so that shapes in messages stay readable
            return f"<sint {self.render()}>"
        return pretty(self)

    def __iter__(self) -> Iterator:
        raise TypeError("a UOp is not iterable; use .src for its sources")


# what a symbolic int (a dim over bound variables, tg_core/uop/sint.py) is made of
_SINT_OPS = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.NEG,
                       Ops.CAST})


def _is_bound_sint(u: UOp) -> bool:
    nodes = u.toposort()
    return len(nodes) < 64 and all(n.op in _SINT_OPS for n in nodes) and any(n.op is Ops.BIND for n in nodes)


def _unpickle(table: list[tuple]) -> UOp:
    """The last node of a table written by UOp.__reduce__, rebuilt (hash-consing gives back live nodes)."""
    nodes: list[UOp] = []
    for op, dtype, src, arg, tag in table:
        nodes.append(UOp(op, dtype, tuple(nodes[i] for i in src), arg, tag))
    return nodes[-1]


def _promote(a: UOp, b: UOp, op: Ops) -> tuple[UOp, UOp]:
    """Both operands in their common dtype; a constant operand is re-made in it rather than cast."""
    dt = least_upper_dtype(a.dtype.scalar(), b.dtype.scalar())
    count = max(a.dtype.count, b.dtype.count)
    dt = dt.vec(count) if count > 1 else dt

    def conv(x: UOp) -> UOp:
        if x.dtype == dt:
            return x
        if x.op is Ops.CONST:
            return UOp.const(dt, x.arg)
        return x.cast(dt)
    return conv(a), conv(b)


# ---- lazily computed analyses ---------------------------------------------------------------------------

def _src_ranges(s: UOp) -> dict[UOp, None]:
    # the sources' ranges are filled before their user's (both callers walk sources first)
    return cast("dict[UOp, None]", s._ranges)


def _compute_ranges(u: UOp) -> dict[UOp, None]:
    if u.op is Ops.RANGE:
        return {**_src_ranges(u.src[0]), u: None}
    if u.op is Ops.CALL:
        srcs = u.src[1:]  # the callee's own loops are internal to it
    elif u.op in (Ops.END, Ops.REDUCE):
        ended = {s for s in u.src[1:] if s.op is Ops.RANGE}
        out: dict[UOp, None] = {}
        for s in u.src:
            if s not in ended:
                out.update((r, None) for r in _src_ranges(s) if r not in ended)
        return out
    else:
        srcs = u.src
    if len(srcs) == 1:
        return _src_ranges(srcs[0])
    out = {}
    for s in srcs:
        out.update(_src_ranges(s))
    return out


def fill_ranges(order: Iterable[UOp]) -> None:
    """Compute `.ranges` of every node in `order` (sources first, each node's sources included): one loop
    for a caller that already holds a toposort, instead of the explicit-stack walk `.ranges` starts."""
    for u in order:
        if u._ranges is None:
            u._ranges = _compute_ranges(u)


def _fill_minmax(u: UOp) -> tuple[ConstType, ConstType]:
    # vrange imports this module, so the real function (vrange.fill: bounds of u and of every node below it
    # that has none yet) is bound on first use
    global _fill_minmax
    from tg_core.uop.vrange import fill
    _fill_minmax = fill
    return fill(u)
