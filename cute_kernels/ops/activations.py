"""The activations of the GEMM epilogues in plain torch: references for the tests and the
backward passes (which recompute pre-activations and differentiate these)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.common.activation_names import GATED_ACTIVATIONS, GATED_TO_ACT  # noqa: F401

#: epilogue activation -> torch function (None: identity)
ACTIVATION_FNS = {
    None: lambda x: x,
    "relu": torch.relu,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def check_activation(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")


def activation(x: torch.Tensor, name: str | None) -> torch.Tensor:
    return ACTIVATION_FNS[name](x)


def activation_and_grad(x: torch.Tensor, name: str | None, grad: torch.Tensor):
    """``(act(x), grad * act'(x))`` in x's dtype, by autograd on the torch function."""
    if name is None:
        return x, grad
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        y = ACTIVATION_FNS[name](xg)
        (dx,) = torch.autograd.grad(y, xg, grad)
    return y.detach(), dx


def gate(up: torch.Tensor, gate_pre: torch.Tensor, activation_name: str) -> torch.Tensor:
    """``act(gate_pre) * up`` for the named gated activation (any dtype, elementwise)."""
    check_activation("activation", activation_name, GATED_ACTIVATIONS)
    return ACTIVATION_FNS[GATED_TO_ACT[activation_name]](gate_pre) * up
