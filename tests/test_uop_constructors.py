"""Issue 15 item 5: tinygrad's spellings of the UOp constructors either work or raise an error naming tg's
spelling (never silently mean something else), and DTypes have .min and .max."""
import numpy as np
import pytest

from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


@pytest.mark.parametrize("call", [lambda: UOp.param(0, dtypes.int, 16), lambda: UOp.param(0, dtypes.int, shape=(16,)),
                                  lambda: UOp.param(0, dtypes.int, (4, 4)), lambda: UOp.param(0, dtypes.int, [16])])
def test_tinygrads_param_shape_names_the_pointer_spelling(call):
    # tinygrad's param(slot, dtype, shape): here it made a scalar param named "16" (a bounds proof passed vacuously)
    with pytest.raises(TypeError, match=r"takes no shape.*UOp\.param\(0, dtypes\.int\.ptr\(16\)\)"):
        call()


def test_tinygrads_placeholder_order_names_tgs_spelling():
    with pytest.raises(TypeError, match=r"the index is an int, got \(16,\).*UOp\.param\(slot, dtype\.ptr"):
        UOp.placeholder((16,), dtypes.int, 0)
    with pytest.raises(TypeError, match=r"UOp\.param takes \(index, dtype, name=None\): its dtype argument is 3"):
        UOp.param(0, 3)


def test_param_spellings_that_work():
    p = UOp.param(0, dtypes.int.ptr(16))
    assert p.op is Ops.PARAM and p.arg == 0 and p.dtype.size == 16 and p.dtype.base is dtypes.int
    named = UOp.param(1, dtypes.float32.ptr(4), "w")
    assert named.arg == (1, "w")
    assert UOp.param(2, dtypes.int).dtype is dtypes.int       # a scalar argument


def test_const_with_the_value_first_names_tgs_order():
    with pytest.raises(TypeError, match=r"UOp\.const takes \(dtype, value\).*write UOp\.const\(dtypes\.int, 3\)"):
        UOp.const(3, dtypes.int)
    with pytest.raises(TypeError, match=r"its dtype argument is 'int', not a DType"):
        UOp.const("int", 3)
    c = UOp.const(dtypes.int, 3)
    assert c.op is Ops.CONST and c.arg == 3 and c.dtype is dtypes.int


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                dtypes.int64, dtypes.uint64])
def test_int_dtype_min_max_match_numpy(dt):
    info = np.iinfo(to_numpy_dtype(dt))
    assert (dt.min, dt.max) == (dtypes.min(dt), dtypes.max(dt))
    assert (dt.min, dt.max) == (info.min, info.max)


def test_float_bool_vector_and_pointer_min_max():
    assert (dtypes.float32.min, dtypes.float32.max) == (-np.inf, np.inf)
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
    assert dtypes.int8.vec(4).max == 127                      # a vector's lanes
    assert dtypes.uint16.ptr(8).max == 65535                  # a pointer's elements
