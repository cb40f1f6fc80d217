"""The Tensor layer: `Tensor` (tensor.py: the primitives) with its mixins, autograd, the gradient rules, the
storage model, and the validation of op arguments. See docs/architecture.md, "Tensors"."""
from tg_core.tensor.tensor import Tensor

__all__ = ["Tensor"]
