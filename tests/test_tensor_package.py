"""The shape of the Tensor layer (tg_core/tensor/): Tensor is its primitives plus the mixins, each name is
defined once, and the storage module's public names do what nn/ and engine/ rely on."""
import importlib

import numpy as np
import pytest

import tg_core
from tg_core.tensor import Tensor, storage
from tg_core.tensor.autograd import AutogradMixin
from tg_core.tensor.base import TensorBase
from tg_core.tensor.creation import CreationMixin
from tg_core.tensor.elementwise import ElementwiseMixin
from tg_core.tensor.movement import MovementMixin
from tg_core.tensor.nn import NNMixin
from tg_core.tensor.reduce import ReduceMixin
from tg_core.tensor.storage import StorageMixin

MIXINS = [CreationMixin, ElementwiseMixin, MovementMixin, ReduceMixin, NNMixin, AutogradMixin, StorageMixin]
_CLASS_BOOKKEEPING = {"__module__", "__doc__", "__slots__", "__qualname__", "__annotations__", "__firstlineno__",
                      "__static_attributes__", "__dict__", "__weakref__", "__annotate_func__", "__annotations_cache__"}


def test_tensor_is_the_primitives_plus_the_mixins():
    assert Tensor is tg_core.Tensor
    assert Tensor.__mro__ == (Tensor, *MIXINS, TensorBase, object)


# class-level flags users set on Tensor itself (`Tensor.training = True`, as in tinygrad): the mixin holds the default
_USER_FLAGS = {"training", "no_grad"}


def test_each_name_is_defined_once():
    # with real mixins a second definition would silently win by the MRO (the old setattr install raised)
    where: dict[str, str] = {}
    for cls in (Tensor, *MIXINS):
        for name in set(vars(cls)) - _CLASS_BOOKKEEPING - (_USER_FLAGS if cls is Tensor else set()):
            assert name not in where, f"{name} is defined in both {where[name]} and {cls.__name__}"
            where[name] = cls.__name__


def test_seeding_and_train_scopes_leave_the_class_definitions_alone():
    """Random tensors and the train/test scopes run before the check above in one process must not make it fail:
    the generator's state is not a class attribute, and the flags are the user-settable ones."""
    Tensor.manual_seed(7)
    Tensor.rand(3).realize()
    with Tensor.train():
        pass
    test_each_name_is_defined_once()


def test_tensor_base_holds_the_data_slots_only():
    assert TensorBase.__slots__ == ("uop", "_device", "_requires_grad", "grad", "__weakref__")
    assert all(c.__slots__ == () for c in (Tensor, *MIXINS))
    # the declarations are for the type checker: at run time TensorBase defines no methods of its own
    assert {n for n in vars(TensorBase) if not n.startswith("__")} == set(TensorBase.__slots__) - {"__weakref__"}


@pytest.mark.parametrize("old", ["tensor_args", "tensor_checks", "tensor_creation", "tensor_elementwise",
                                 "tensor_movement", "tensor_nn", "tensor_reduce", "gradient"])
def test_old_modules_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"tg_core.{old}")


def test_storage_of_views_and_values():
    a = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    buf = storage.storage_of(a.uop)
    assert buf is not None and buf.op.name == "BUFFER"
    assert storage.storage_of(a.reshape(2, 2).permute(1, 0).uop) is buf     # a view of a's storage
    assert storage.storage_of((a + 1).uop) is None                          # a value
    assert storage.buffers_in((a * a + 1).uop) == [buf]


def test_write_is_simultaneous_and_keeps_readers():
    a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
    reader = a * 10  # lazy, reads a's old contents
    storage.write([(a, b.uop), (b, a.uop)])
    np.testing.assert_array_equal(a.numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(b.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(reader.numpy(), [10.0, 20.0])


def test_forget_origin_stops_gradients_at_the_buffer():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).realize()
    g, = (y * y).sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), [18.0, 36.0])   # through the graph y was computed from
    storage.forget_origin(storage.storage_of(y.uop))
    g, = (y * y).sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), [0.0, 0.0])      # y's buffer is now a leaf


def test_live_tensors_tracks_and_forgets():
    t = Tensor([5.0])
    assert any(u is t for u in storage.live_tensors())
    key = id(t)
    del t
    assert all(id(u) != key for u in storage.live_tensors())


def test_flags_are_scoped_on_tensor():
    assert Tensor.training is False and Tensor.no_grad is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.test():
            assert Tensor.no_grad is True
            assert Tensor([1.0, 2.0]).relu().uop.op.name == "DETACH"  # made under no_grad: no gradient path
        assert Tensor.no_grad is False
    assert Tensor.training is False
