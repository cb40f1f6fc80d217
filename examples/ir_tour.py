"""A short tour of tg's IR: build index expressions, simplify them, ask their ranges, prove an access
in bounds, and write a rewrite rule of your own. Run: python examples/ir_tour.py"""
from tg_core import Context, dtypes
from tg_core.uop import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from tg_core.uop.validate import validate_index


def main() -> None:
    # a 2-D loop nest over a 64x48 image stored row-major, read through a reshape to (3072,) and back
    row = UOp.range(64, 0)
    col = UOp.range(48, 1)
    flat = row * 48 + col
    index = (flat // 48) * 48 + flat % 48  # what a reshape round trip produces
    print("index as built:     ", index.render())
    simple = index.simplify()
    print("index simplified:   ", simple.render())
    print(f"its range:           [{simple.vmin}, {simple.vmax}]")

    # hash-consing: building the same expression again gives the very same object
    assert (row * 48 + col) is flat

    # like terms combine even when interleaved, and div/mod by constants fold using ranges
    x = UOp.variable("x", 0, 100)
    y = UOp.variable("y", 0, 7)
    e = (x * 4 + y * 8 + 3) // 4 + x * 2 - (y % 8)
    print("expression:         ", e.render())
    print("simplified:         ", e.simplify().render())
    print("x < 3 given x*2 < 5: ", (x * 2 < 5).simplify().render())

    # proving an access in bounds: vmin/vmax first, z3 when ranges alone cannot decide
    buf = UOp.param(0, dtypes.float32.ptr(64 * 48), "image")
    load = buf.index(simple).load()
    with Context(CHECK_OOB=1):
        validate_index(load.sink())
        print(f"in bounds:           image[{simple.render()}] for every row and col")
        bad = buf.index(simple + 1).load()
        try:
            validate_index(bad.sink())
        except RuntimeError as err:
            print("out of bounds:      ", str(err).splitlines()[0])

    # your own rule: strength-reduce multiplication by a power of two into a shift
    def mul_to_shift(v: UOp, c: UOp) -> UOp | None:
        k = c.arg
        if k > 1 and k & (k - 1) == 0:
            return UOp(Ops.SHL, v.dtype, (v, UOp.const(v.dtype, k.bit_length() - 1)))
        return None

    shifts = PatternMatcher([(UPat.var("v") * UPat.cvar("c", vec=False), mul_to_shift)])
    print("with shifts:        ", graph_rewrite(simple * 8, shifts).render())


if __name__ == "__main__":
    main()
