"""``nn.Module`` front-ends of the kernels."""

from __future__ import annotations

import math

import torch
from torch import nn

from .ops.activations import GATED_ACTIVATIONS, check_activation
from .ops.gated_mlp import gated_mlp_up, pack_gated_weight, unpack_gated_weight
from .ops.gemm import linear

#: Hugging Face ``hidden_act`` names -> our gated activations
HF_ACT_TO_GATED = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu",
                   "gelu_pytorch_tanh": "geglu_tanh", "gelu_new": "geglu_tanh",
                   "relu": "reglu"}


class GatedMLP(nn.Module):
    """A Llama-style gated MLP: ``down(act(x W_gate^T) * (x W_up^T))``.

    The gate and up projections live in one interleaved ``w_packed`` (2I, hidden) parameter
    (up rows even, gate rows odd), computed by the fused gated kernel, which writes only the
    (tokens, I) activation; the down projection is our GEMM. bf16 or fp16 parameters.
    """

    def __init__(self, hidden: int, intermediate: int, activation: str = "swiglu",
                 bias: bool = False, *, device=None, dtype=torch.bfloat16):
        super().__init__()
        check_activation("activation", activation, GATED_ACTIVATIONS)
        for name, v in (("hidden", hidden), ("intermediate", intermediate)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v % 8:
                raise ValueError(f"{name} must be a positive multiple of 8, got {v!r}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"dtype must be bfloat16 or float16, got {dtype}")
        self.hidden, self.intermediate, self.activation = hidden, intermediate, activation
        kw = {"device": device, "dtype": dtype}
        self.w_packed = nn.Parameter(torch.empty(2 * intermediate, hidden, **kw))
        self.w_down = nn.Parameter(torch.empty(hidden, intermediate, **kw))
        self.b_packed = nn.Parameter(torch.empty(2 * intermediate, **kw)) if bias else None
        self.b_down = nn.Parameter(torch.empty(hidden, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation for each projection (the packing keeps it per row)."""
        for w, b, fan_in in ((self.w_packed, self.b_packed, self.hidden),
                             (self.w_down, self.b_down, self.intermediate)):
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))
            if b is not None:
                bound = 1 / math.sqrt(fan_in)
                nn.init.uniform_(b, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = gated_mlp_up(x, self.w_packed, activation=self.activation, bias=self.b_packed)
        return linear(h, self.w_down, self.b_down)

    @property
    def gate_up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(w_gate, w_up)`` views of the packed weight."""
        return unpack_gated_weight(self.w_packed)

    @classmethod
    def from_llama(cls, mlp: nn.Module, activation: str | None = None,
                   dtype: torch.dtype | None = None) -> GatedMLP:
        """Convert a Hugging Face ``LlamaMLP``-shaped module (``gate_proj``, ``up_proj``,
        ``down_proj`` linears and ``act_fn``/``config.hidden_act``) to a GatedMLP with the
        same outputs. ``activation`` overrides the detected one; ``dtype`` converts fp32."""
        for name in ("gate_proj", "up_proj", "down_proj"):
            if not isinstance(getattr(mlp, name, None), nn.Linear):
                raise TypeError(f"mlp.{name} must be an nn.Linear (a LlamaMLP-shaped module)")
        activation = activation or _detect_activation(mlp)
        gate_p, up_p, down_p = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        dtype = dtype or gate_p.weight.dtype
        bias = gate_p.bias is not None
        if (up_p.bias is not None) != bias:
            raise ValueError("gate_proj and up_proj must both have a bias or both not")
        hidden, inter = gate_p.in_features, gate_p.out_features
        out = cls(hidden, inter, activation, bias=bias or down_p.bias is not None,
                  device=gate_p.weight.device, dtype=dtype)
        with torch.no_grad():
            out.w_packed.copy_(pack_gated_weight(gate_p.weight, up_p.weight))
            out.w_down.copy_(down_p.weight)
            if out.b_packed is not None:
                zeros = torch.zeros(inter, device=gate_p.weight.device)
                out.b_packed.copy_(pack_gated_weight(
                    gate_p.bias if bias else zeros, up_p.bias if bias else zeros))
                out.b_down.copy_(down_p.bias if down_p.bias is not None
                                 else torch.zeros(hidden))
        return out

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, intermediate={self.intermediate}, "
                f"activation={self.activation!r}, bias={self.b_packed is not None}")


def _detect_activation(mlp: nn.Module) -> str:
    config = getattr(mlp, "config", None)
    name = getattr(config, "hidden_act", None) or getattr(mlp, "hidden_act", None)
    if name is None:
        act = getattr(mlp, "act_fn", None)
        name = {nn.SiLU: "silu", nn.ReLU: "relu", nn.GELU: "gelu"}.get(type(act))
        if isinstance(act, nn.GELU) and act.approximate == "tanh":
            name = "gelu_pytorch_tanh"
    if name not in HF_ACT_TO_GATED:
        raise ValueError(f"cannot tell the gated activation of {type(mlp).__name__} "
                         f"(hidden_act={name!r}); pass activation= one of {GATED_ACTIVATIONS}")
    return HF_ACT_TO_GATED[name]
