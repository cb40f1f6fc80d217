"""The operations of the IR and the groups that rules and passes select them by."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class FastEnum(Enum):
    """An Enum whose members compare and hash by identity (the default Enum hash goes through the name)."""

    # object's C-level identity hash: Enum's own __hash__ is a Python call on the name, and every UOp
    # construction hashes its op
    __hash__ = object.__hash__

    def __lt__(self, other: FastEnum) -> bool:
        return self.value < other.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list) -> int:
        return count


class Ops(FastEnum):
    # sources of values
    CONST = auto()          # arg: the value; dtype may be a vector (the value is broadcast)
    VCONST = auto()         # arg: tuple of lane values
    DEFINE_VAR = auto()     # a bounded symbolic variable; arg: (name, min, max)
    BIND = auto()           # src: (DEFINE_VAR, CONST value)
    PARAM = auto()          # a numbered placeholder (kernel argument, function input); arg: index
    SPECIAL = auto()        # a hardware index (workgroup/workitem id, core id); src: (size,), arg: name
    RANGE = auto()          # a loop index 0 <= r < src[0]; arg: (axis id, AxisType)
    DEFINE_LOCAL = auto()   # workgroup-shared memory; arg: name
    DEFINE_REG = auto()     # a register array (accumulators); arg: name
    UNIQUE = auto()         # makes otherwise equal nodes distinct; arg: a counter
    DEVICE = auto()         # arg: device name

    # elementwise: unary
    EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto()  # noqa: E702
    NEG = auto(); TRUNC = auto()  # noqa: E702
    # elementwise: binary
    ADD = auto(); MUL = auto(); SUB = auto(); FDIV = auto(); IDIV = auto(); MOD = auto()  # noqa: E702
    MAX = auto(); POW = auto()  # noqa: E702
    CMPLT = auto(); CMPNE = auto(); CMPEQ = auto()  # noqa: E702
    AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()  # noqa: E702
    THREEFRY = auto()
    # elementwise: ternary
    WHERE = auto(); MULACC = auto()  # noqa: E702
    CAST = auto(); BITCAST = auto()  # noqa: E702

    # vectors
    VECTORIZE = auto()      # src: lanes
    GEP = auto()            # arg: tuple of lane indices
    CAT = auto()
    UNROLL = auto(); CONTRACT = auto()  # noqa: E702

    # memory
    INDEX = auto()          # src: (buffer, index[, valid])
    LOAD = auto()           # src: (INDEX[, alt value])
    STORE = auto()          # src: (INDEX, value)
    BARRIER = auto()

    # control
    END = auto()            # src: (value, *ranges or IF it ends)
    IF = auto()
    REDUCE = auto()         # src: (value, *ranges reduced); arg: the reducing op
    WMMA = auto()
    SINK = auto()
    GROUP = auto()
    AFTER = auto()          # src: (value, *effects it is ordered after)
    NOOP = auto()
    CUSTOM = auto()         # arg: a format string the renderer fills
    CUSTOM_FUNCTION = auto()  # an external function; arg: its name
    CALL = auto()           # src: (callee, *args)
    LINEAR = auto()         # an ordered program
    INS = auto()            # a hardware-queue instruction; arg: its kind

    # tensor level
    BUFFER = auto(); BUFFER_VIEW = auto(); COPY = auto(); CONTIGUOUS = auto(); DETACH = auto()  # noqa: E702
    ASSIGN = auto()
    RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
    REDUCE_AXIS = auto()    # arg: (op, axes)
    ARANGE = auto()         # arg: n; the ints 0..n-1 of shape (n,): the element index, as a value
    MULTI = auto()          # a tensor held in shards on several devices; src: the shards, arg: ((device, box), ...)


class AxisType(FastEnum):
    GLOBAL = auto(); LOCAL = auto(); LOOP = auto(); GROUP_REDUCE = auto(); REDUCE = auto()  # noqa: E702
    UPCAST = auto(); UNROLL = auto(); THREAD = auto()  # noqa: E702


class GroupOp:
    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.MUL, Ops.SUB, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.POW, Ops.CMPLT,
                        Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY})
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    # ops whose result is unchanged when a zero input becomes a zero output (safe to pad through)
    UnsafePad = frozenset({Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW, Ops.FDIV, Ops.CMPEQ})
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.PARAM, Ops.DEFINE_LOCAL, Ops.DEFINE_REG, Ops.INDEX})
    Defines = frozenset({Ops.PARAM, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})


@dataclass(frozen=True)
class KernelInfo:
    """The arg of a kernel AST's SINK: what the kernel is called (and, later, the optimizations applied)."""
    name: str = "kernel"
