"""How every public op reaches its kernel: one routing rule, written once.

Checked in this order (:meth:`KernelOp.route`):

==========================  ==========================================================
call                        route
==========================  ==========================================================
under ``torch.compile``     ``op``: the registered custom op, traced through its fake
                            implementation (so ``fullgraph=True`` works)
gradient needed             ``autograd``: the custom op with its autograd formula (an op
                            without one raises ``NotImplementedError``, in every mode)
meta tensors, tensor        ``op``: the fake implementation gives meta outputs' shapes and
subclasses (fake, DTensor)  dtypes (``device="meta"`` models); subclasses get their own
                            dispatch
eager inference             ``direct``: the compiled kernel through TVM-FFI, no dispatcher
==========================  ==========================================================

The eager route skips torch's custom-op dispatcher on purpose: a call through it costs tens
of µs, and the first one in a process imports large parts of torch (Dynamo, FSDP, sympy:
seconds on a GPU machine) although the kernel is already compiled.

``out=``: the direct route writes into ``out``; the ``op`` route copies its fresh result into
it; the ``autograd`` route refuses it (autograd needs a fresh output).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch


def needs_grad(*tensors) -> bool:
    """Whether autograd must record a call on ``tensors`` (None entries allowed)."""
    # not a tensor: nothing to record (the op's checks name the argument)
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in tensors)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def plain_eager(tensors, tracked) -> bool:
    """Whether an eager call on ``tensors`` (None entries allowed) may go straight to a plan
    cached by an earlier call (the ops' fast paths, ops/gemm.py and ops/attention.py): plain
    tensors (no subclass, not meta), no gradient to record on ``tracked``, not tracing; such
    a call is one :meth:`KernelOp.route` sends "direct"."""
    # loops, not needs_grad's generator: this runs on every repeat eager call of every op
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or t.is_meta):
            return False
    if torch.is_grad_enabled():
        for t in tracked:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return False
    return not torch.compiler.is_compiling()


def is_meta(t) -> bool:
    """Whether ``t`` is a tensor only torch's dispatcher can handle: a meta tensor or a tensor
    subclass (fake tensors of tracing, DTensor, ...)."""
    return isinstance(t, torch.Tensor) and (t.is_meta or type(t) not in _PLAIN)


class KernelOp:
    """One public op's routes (module docstring).

    ``op``: the ``torch.library.custom_op`` (with ``register_fake``, and ``register_autograd``
    when ``differentiable``), taking the positional arguments ``args`` of :meth:`__call__`.
    ``direct``: the eager implementation, ``direct(*args)`` or ``direct(*args, out=out)``,
    doing everything the op's body does (the body is usually ``direct(*args)``).
    ``grad_inputs``: names of ``direct``'s parameters whose tensors autograd may track;
    ``differentiable``: whether ``op`` has an autograd formula; ``check(*args)``, if given,
    validates the arguments before the autograd route on real tensors (the direct route
    validates inside ``direct``).
    """

    def __init__(self, op, direct: Callable, *, grad_inputs: tuple[str, ...] = (),
                 differentiable: bool = False, check: Callable | None = None):
        self.op = op
        self.direct = direct
        self.check = check
        self.differentiable = differentiable
        params = list(inspect.signature(direct).parameters)
        unknown = [n for n in grad_inputs if n not in params]
        if unknown:
            raise TypeError(f"grad_inputs {unknown} are not parameters of {direct}")
        self._grad_index = tuple(params.index(n) for n in grad_inputs)
        self.name = getattr(op, "_name", None) or getattr(direct, "__name__", "op")
        inputs = ", ".join(grad_inputs[:-1]) + (" and " if len(grad_inputs) > 1 else "")
        self._no_backward = (f"{self.name} has no backward yet: call it under torch.no_grad() "
                             f"or torch.inference_mode(), or detach {inputs}{grad_inputs[-1]}"
                             if grad_inputs else "")

    def route(self, *args) -> str:
        """Which route a call on ``args`` takes: "op" (compiling, or meta tensors without
        gradients), "autograd" (the op with its autograd formula) or "direct"; raises
        ``NotImplementedError`` for a gradient the op has no formula for."""
        tracked = bool(self._grad_index) and needs_grad(*(args[i] for i in self._grad_index))
        if tracked and not self.differentiable:
            raise NotImplementedError(self._no_backward)
        if torch.compiler.is_compiling():
            return "op"
        if tracked:
            return "autograd"
        return "op" if is_meta(args[0]) else "direct"

    def __call__(self, *args, out: torch.Tensor | None = None):
        route = self.route(*args)
        if route == "direct":
            return self.direct(*args) if out is None else self.direct(*args, out=out)
        if route == "op":
            return self._into(out, self.op(*args))
        if out is not None:
            raise ValueError("out= is not supported when gradients are required "
                             "(autograd needs a fresh output)")
        if self.check is not None and not is_meta(args[0]):
            self.check(*args)
        return self.op(*args)

    @staticmethod
    def _into(out, result):
        if out is None:
            return result
        if isinstance(result, tuple):  # (o, extras...): out receives the first output
            out.copy_(result[0])
            return (out, *result[1:])
        return out.copy_(result)
