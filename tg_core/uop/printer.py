"""Text forms of UOp graphs: `render` writes an expression as code-like text, `pretty` lists a graph's
nodes one per line (shared nodes printed once and referred to by number)."""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<",
          Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
_CALLS = {Ops.MAX: "max", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt",
          Ops.RECIPROCAL: "recip", Ops.TRUNC: "trunc", Ops.POW: "pow", Ops.NEG: "neg", Ops.MULACC: "mulacc"}
MAX_RENDER = 2000


def _const(u: UOp) -> str:
    v = u.arg
    if u.dtype.scalar() is dtypes.bool:
        return "True" if v else "False"
    return repr(v)


def render(root: UOp) -> str:
    """`root` as an expression; long expressions are cut with '...'."""
    text: dict[UOp, str] = {}
    for u in root.toposort():
        s = [text[x] for x in u.src]
        if u.op is Ops.CONST:
            t = _const(u)
        elif u.op is Ops.DEFINE_VAR:
            t = u.arg[0]
        elif u.op is Ops.RANGE:
            t = f"r{u.arg[0]}" if not isinstance(u.arg[0], tuple) else "r" + "_".join(map(str, u.arg[0]))
        elif u.op is Ops.SPECIAL:
            t = str(u.arg)
        elif u.op is Ops.PARAM:
            t = f"param{u.arg}" if not isinstance(u.arg, tuple) else str(u.arg[1])
        elif u.op in _INFIX and len(s) == 2:
            t = f"({s[0]}{_INFIX[u.op]}{s[1]})"
        elif u.op in _CALLS:
            t = f"{_CALLS[u.op]}({', '.join(s)})"
        elif u.op is Ops.WHERE:
            t = f"({s[1]} if {s[0]} else {s[2]})"
        elif u.op is Ops.CAST:
            t = f"{u.dtype.name}({s[0]})"
        elif u.op is Ops.BITCAST:
            t = f"bitcast<{u.dtype.name}>({s[0]})"
        elif u.op is Ops.INDEX:
            t = f"{s[0]}[{s[1]}]" + (f" if {s[2]}" if len(s) > 2 else "")
        elif u.op is Ops.LOAD:
            t = f"load({s[0]})"
        elif u.op is Ops.BIND:
            t = f"{s[0]}={s[1]}"
        else:
            t = f"{u.op.name}({', '.join(s)})" + (f"[{u.arg!r}]" if u.arg is not None else "")
        if len(t) > MAX_RENDER:
            t = t[:MAX_RENDER // 2] + " ... " + t[-MAX_RENDER // 2:]
        text[u] = t
    return text[root]


def pretty(root: UOp, max_lines: int = 200) -> str:
    """One line per node: index, op, dtype, sources by index, arg."""
    nodes = list(root.toposort())
    if len(nodes) == 1 and not root.src:
        return f"UOp({root.op}, {root.dtype!r}, arg={root.arg!r}" + (f", tag={root.tag!r})" if root.tag is not None else ")")
    ids = {u: i for i, u in enumerate(nodes)}
    lines = []
    for u in nodes[-max_lines:]:
        srcs = ", ".join(f"%{ids[s]}" for s in u.src)
        tag = f" tag={u.tag!r}" if u.tag is not None else ""
        arg = f" {u.arg!r}" if u.arg is not None else ""
        lines.append(f"%{ids[u]:<4} {u.op.name:<12} {u.dtype!r:<24} ({srcs}){arg}{tag}")
    if len(nodes) > max_lines:
        lines.insert(0, f"... {len(nodes) - max_lines} earlier nodes")
    return "\n".join(lines)
