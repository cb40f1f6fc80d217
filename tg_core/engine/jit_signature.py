"""The signature of a TinyJit call: the tensors and bound variables its arguments hold, and the rest of them,
which a capture freezes and a replay must therefore match.

Arguments are walked through tuples, lists and dicts (and their subclasses, such as namedtuples and
OrderedDicts) and the fields of frozen dataclasses, however deeply nested: every Tensor found is an input of
the capture, every bound variable a value a replay passes on (a tensor of no elements has no memory to read:
it is structure, its dtype, shape and device must match). Everything else is the call's *structure*:
container types, lengths and dict keys (in order: the function may iterate them), plain values by value
(floats by their bits, so -0.0 and nan are told apart from 0.0 and each other as a kernel constant would be)
and any other object by identity (what the function read from it is baked into the kernels; a bound method
by its function and object). `mismatch` names the first difference between two calls.
"""
from __future__ import annotations

import copy
import dataclasses
import enum
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_core.dtype import DType
from tg_core.tensor import Tensor
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

# compared by value (their value is what a capture freezes); any other non-container object by identity
_VALUE_TYPES = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), slice, range, enum.Enum,
                np.generic, DType)
_SEQUENCES = (tuple, list)


class SignatureError(ValueError):
    """An argument a TinyJit cannot take (engine/jit.py raises it as a JitError)."""


@dataclass(slots=True)  # not frozen, like the nodes below: a frozen dataclass is slower to make, on every replay
class _Value:
    """A plain value: equal when the type and the bits are (`shown` is only for messages)."""
    type: type
    key: Any
    shown: Any = field(compare=False)


@dataclass(slots=True, eq=False)
class _Object:
    """Any other object: equal only to itself. The signature holds it, so its id is not reused meanwhile."""
    obj: Any

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Object) and other.obj is self.obj


@dataclass(slots=True, eq=False)
class _Method:
    """A bound method: a new object on every attribute access, so equal when its function and its object
    (by identity) are."""
    func: Any
    obj: Any

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Method) and other.func == self.func and other.obj is self.obj  # func: or a name


@dataclass(frozen=True, slots=True)
class _Sharded:
    """A sharded tensor (tensor/multi.py): its shards are inputs, its placement (device and box of every shard) is
    structure."""
    placement: tuple

    def __str__(self) -> str:
        return "a tensor sharded as " + ", ".join(f"{d} {list(box)}" for d, box in self.placement)


@dataclass(slots=True)
class _Empty:
    """A tensor of no elements: it has no memory for a kernel to read, so it is structure, not an input."""
    dtype: DType
    shape: tuple
    device: str

    def __str__(self) -> str:
        return f"an empty {self.dtype.name} {self.shape} tensor on {self.device}"


@dataclass(slots=True)
class _Var:
    var: UOp  # the DEFINE_VAR a bound variable binds


@dataclass(slots=True)
class _Seq:
    type: type
    items: tuple


@dataclass(slots=True)
class _Map:
    type: type
    keys: tuple
    items: tuple


@dataclass(slots=True)
class _Fields:
    """A frozen dataclass: a value made of its fields (a mutable one is an object: it may change unseen)."""
    type: type
    names: tuple
    items: tuple


_TENSOR = "Tensor"


@dataclass
class Signature:
    """What `read` found: `tree` (compared with ==), the input tensors and their labels in walk order, and the
    bound variables by name."""
    tree: tuple
    labels: list[str]                     # the top-level arguments as errors name them
    tensors: list[Tensor]
    tensor_labels: list[str]
    binds: dict[str, UOp]


def read(args: tuple, kwargs: dict[str, Any]) -> Signature:
    """Walk a call's arguments (keywords in name order). Raises SignatureError for an argument no replay could
    take: an unbound variable, a set holding tensors, one variable bound to two values."""
    names = tuple(sorted(kwargs)) if kwargs else ()
    sig = Signature((), [], [], [], {})
    nodes = []
    for i, a in enumerate(args):  # a plain loop: this runs on every replay
        sig.labels.append(label := _ARG_LABELS[i] if i < len(_ARG_LABELS) else f"argument {i}")
        nodes.append(_walk(a, label, sig))
    for k in names:
        sig.labels.append(label := f"keyword argument {k!r}")
        nodes.append(_walk(kwargs[k], label, sig))
    sig.tree = (len(args), names, tuple(nodes))
    return sig


_ARG_LABELS = [f"argument {i}" for i in range(16)]  # made once: read() labels every argument of every replay


def _walk(a: Any, label: str, sig: Signature) -> Any:
    if isinstance(a, Tensor):
        if 0 in a.uop.tensor_shape:
            return _Empty(a.dtype, a.shape, a.device)
        if type(a._device) is not str:  # sharded: one input per shard (tensor/multi.py)
            from tg_core.tensor.multi import shard_tensors
            shards = shard_tensors(a)
            sig.tensors.extend(shards)
            sig.tensor_labels.extend(f"{label} (shard {i} on {s.device})" for i, s in enumerate(shards))
            return _Sharded(a.uop.arg)  # a call sharded otherwise does not match
        sig.tensors.append(a)
        sig.tensor_labels.append(label)
        return _TENSOR
    if isinstance(a, UOp):
        if a.op is not Ops.BIND:
            raise SignatureError(f"{label} is an unbound {a.op.name} UOp; pass a bound variable "
                                 "(UOp.variable(name, lo, hi).bind(value)) or a Tensor")
        name, value = a.src[0].arg[0], a.src[1].arg
        if name in sig.binds and sig.binds[name].src[1].arg != value:
            raise SignatureError(f"{label} binds variable {name} to {value}, another argument binds it to "
                                 f"{sig.binds[name].src[1].arg}; a call gives each variable one value")
        sig.binds[name] = a
        return _Var(a.src[0])
    if isinstance(a, _SEQUENCES):
        return _Seq(type(a), tuple(_walk(x, _item_label(label, type(a), i), sig) for i, x in enumerate(a)))
    if isinstance(a, dict):
        return _Map(type(a), tuple(a), tuple(_walk(x, f"{label}[{k!r}]", sig) for k, x in a.items()))
    # every dataclass has __dataclass_params__; typeshed's DataclassInstance protocol does not declare it
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and a.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        names = tuple(f.name for f in dataclasses.fields(a))
        return _Fields(type(a), names, tuple(_walk(getattr(a, n), f"{label}.{n}", sig) for n in names))
    if isinstance(a, (set, frozenset)):
        inside = Signature((), [], [], [], {})
        for x in a:
            _walk(x, label, inside)
        if inside.tensors or inside.binds:
            raise SignatureError(f"{label} is a {type(a).__name__} holding Tensors or variables: a set has no "
                                 "order to match them to the captured inputs by; pass a list or tuple")
        return _Value(type(a), a, a)
    if isinstance(a, _VALUE_TYPES):
        return _Value(type(a), _bits(a), a)
    if isinstance(a, types.MethodType):
        return _Method(a.__func__, a.__self__)
    if isinstance(a, types.BuiltinMethodType) and not isinstance(a.__self__, types.ModuleType):
        return _Method(a.__name__, a.__self__)  # a builtin's method ([].append); a module's function is one object
    return _Object(a)


def _item_label(label: str, seq_type: type, i: int) -> str:
    fields = getattr(seq_type, "_fields", None)  # a namedtuple's items are named by their fields
    return f"{label}.{fields[i]}" if fields else f"{label}[{i}]"


def _bits(v: Any) -> Any:
    if isinstance(v, float):
        return v.hex()
    if isinstance(v, complex):
        return v.real.hex(), v.imag.hex()
    if isinstance(v, np.generic):
        return v.tobytes()
    return v


# ---- describing a difference ---------------------------------------------------------------------------------

def mismatch(old: Signature, new: Signature) -> str | None:
    """The first difference between two calls' structures, as a sentence naming the argument; None if equal."""
    if old.tree == new.tree:
        return None
    if old.labels != new.labels:
        return (f"it was captured with {', '.join(old.labels) or 'no arguments'} and is called with "
                f"{', '.join(new.labels) or 'no arguments'}")
    for label, o, n in zip(new.labels, old.tree[2], new.tree[2]):
        if (why := _diff(o, n, label)) is not None:
            return why
    raise AssertionError("the structures differ but no difference was located")


def _diff(old: Any, new: Any, label: str) -> str | None:
    if old == new:
        return None
    if type(old) is not type(new) or isinstance(new, (_Seq, _Map, _Fields)) and old.type is not new.type:
        return f"{label} is a {_kind(new)} but was a {_kind(old)} at capture"
    if isinstance(new, _Value):
        return (f"{label} was {old.shown!r} at capture and is {new.shown!r} now; Python values are frozen into the "
                "captured kernels, pass a Tensor or a bound variable instead")
    if isinstance(new, _Var):
        return f"{label} binds variable {new.var.arg} instead of {old.var.arg}"
    if isinstance(new, (_Empty, _Sharded)):
        return f"{label} is {new}, captured as {old}"
    if isinstance(new, _Method):
        return (f"{label} is {_method_name(new)} but was {_method_name(old)} at capture; a capture freezes the "
                "objects it is called with")
    if isinstance(new, _Object):
        return (f"{label} is another {type(new.obj).__name__} object than at capture; a capture freezes the objects "
                "it is called with (what the function read from them is baked into the kernels), pass the data "
                "that changes as Tensors (also inside lists, tuples, dicts and frozen dataclasses)")
    if isinstance(new, _Seq):
        if len(old.items) != len(new.items):
            return (f"{label} is a {_kind(new)} of {len(new.items)} items but was a {_kind(old)} of "
                    f"{len(old.items)} at capture")
        children = [(o, n, _item_label(label, new.type, i)) for i, (o, n) in enumerate(zip(old.items, new.items))]
    elif isinstance(new, _Fields):
        children = [(o, n, f"{label}.{k}") for k, o, n in zip(new.names, old.items, new.items)]
    else:
        if old.keys != new.keys:
            return f"{label} has the keys {list(new.keys)} but had {list(old.keys)} at capture"
        children = [(o, n, f"{label}[{k!r}]") for k, o, n in zip(new.keys, old.items, new.items)]
    return next(why for o, n, child in children if (why := _diff(o, n, child)) is not None)


def _method_name(m: _Method) -> str:
    name = m.func if isinstance(m.func, str) else m.func.__qualname__
    return f"method {name} of a {type(m.obj).__name__} object at {id(m.obj):#x}"


def _kind(node: Any) -> str:
    if node == _TENSOR:
        return "Tensor"
    if isinstance(node, _Empty):
        return "Tensor of no elements"
    if isinstance(node, _Var):
        return "bound variable"
    if isinstance(node, _Value):
        return "Python value"
    if isinstance(node, _Object):
        return type(node.obj).__name__
    if isinstance(node, _Method):
        return "bound method"
    return node.type.__name__


# ---- return values ---------------------------------------------------------------------------------------------

def remake(c: tuple | list | dict, items: list[Any]) -> Any:
    """A container like `c` (its type, and its keys for a dict) holding `items` instead."""
    if isinstance(c, dict):
        out = copy.copy(c)  # keeps a subclass and its extra state (a defaultdict's factory)
        out.update(zip(c.keys(), items))
        return out
    if hasattr(type(c), "_fields"):  # a namedtuple takes its fields positionally
        return type(c)(*items)
    return type(c)(items)


__all__ = ["Signature", "SignatureError", "mismatch", "read", "remake"]
