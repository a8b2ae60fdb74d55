"""``nn.Module`` front-ends of the kernels."""

from __future__ import annotations

import math

import torch
from torch import nn

from .ops.activations import GATED_ACTIVATIONS, check_activation
from .ops.gated_mlp import gated_mlp_up, pack_gated_weight, unpack_gated_weight
from .ops.gemm import linear

#: the parameter dtypes the kernels take
DTYPES = (torch.bfloat16, torch.float16)

#: Hugging Face ``hidden_act`` names -> our gated activations
HF_ACT_TO_GATED = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu",
                   "gelu_pytorch_tanh": "geglu_tanh", "gelu_new": "geglu_tanh",
                   "relu": "reglu"}


class GatedMLP(nn.Module):
    """A Llama-style gated MLP: ``down(act(x W_gate^T) * (x W_up^T))``.

    The gate and up projections live in one interleaved ``w_packed`` (2I, hidden) parameter
    (up rows even, gate rows odd), computed by the fused gated kernel, which writes only the
    (tokens, I) activation; the down projection is our GEMM. bf16 or fp16 parameters.

    ``GatedMLP(hidden, intermediate, activation="swiglu", bias=False, device=, dtype=)``
    builds one with fresh weights; :meth:`from_llama` converts a Hugging Face ``LlamaMLP``
    (pass ``dtype=torch.bfloat16`` for a float32 model). ``forward(x)`` maps (..., hidden)
    to (..., hidden). See ``help(GatedMLP.__init__)`` and ``help(GatedMLP.forward)``.
    """

    def __init__(self, hidden: int, intermediate: int, activation: str = "swiglu",
                 bias: bool = False, *, device=None, dtype=torch.bfloat16):
        """A new gated MLP with ``nn.Linear``'s initialisation of each projection.

        Args:
            hidden: the model width H (input and output features), a positive multiple of 8.
            intermediate: the MLP width I, a positive multiple of 8.
            activation: the gate's activation: "swiglu" (SiLU, Llama), "geglu" (erf GELU),
                "geglu_tanh" (tanh GELU) or "reglu" (ReLU).
            bias: give the gate, up and down projections biases (Llama has none).
            device: where the parameters live (the kernels need a CUDA device to run;
                ``"meta"`` builds a shape-only module).
            dtype: the parameters' dtype, ``torch.bfloat16`` (default) or ``torch.float16``.

        Parameters: ``w_packed`` (2I, H) with up rows even and gate rows odd, ``w_down``
        (H, I), and with ``bias`` ``b_packed`` (2I,) interleaved the same way and ``b_down``
        (H,). To load existing weights use :meth:`from_llama`, or
        :func:`~cute_kernels.pack_gated_weight` and ``copy_`` into ``w_packed``.

        Raises:
            ValueError: ``hidden`` or ``intermediate`` not a positive multiple of 8, or an
                unknown ``activation``.
            TypeError: ``dtype`` other than bfloat16 or float16.
        """
        super().__init__()
        check_activation("activation", activation, GATED_ACTIVATIONS)
        for name, v in (("hidden", hidden), ("intermediate", intermediate)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v % 8:
                raise ValueError(f"{name} must be a positive multiple of 8, got {v!r}")
        if dtype not in DTYPES:
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
        """``down(act(x W_gate^T + b_gate) * (x W_up^T + b_up)) + b_down``.

        Args:
            x: (..., H) activations in the parameters' dtype (bf16 or fp16), on their CUDA
                device; any number of leading dims and rows.

        Returns:
            (..., H) in the same dtype. Two kernel launches: the fused gated up-projection
            (:func:`~cute_kernels.gated_mlp_up`, which writes only the (tokens, I)
            activation) and the down projection (:func:`~cute_kernels.linear`).
            Differentiable: gradients reach ``x`` and every parameter (the gradient
            GEMMs run in torch).

        Raises:
            TypeError / ValueError: from :func:`~cute_kernels.gated_mlp_up`, naming the
                argument (``x`` of another dtype, or with a last dim other than H; a CPU
                tensor).
        """
        h = gated_mlp_up(x, self.w_packed, activation=self.activation, bias=self.b_packed)
        return linear(h, self.w_down, self.b_down)

    @property
    def gate_up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(w_gate, w_up)`` views of the packed weight."""
        return unpack_gated_weight(self.w_packed)

    @classmethod
    def from_llama(cls, mlp: nn.Module, activation: str | None = None,
                   dtype: torch.dtype | None = None) -> GatedMLP:
        """Convert a Hugging Face ``LlamaMLP``-shaped module to a GatedMLP with the same
        outputs (up to the kernels' bf16/fp16 rounding).

        Args:
            mlp: a module with ``gate_proj``, ``up_proj`` and ``down_proj`` ``nn.Linear``
                layers and its activation in ``config.hidden_act``, ``hidden_act`` or
                ``act_fn`` (e.g. ``transformers``' ``LlamaMLP``, ``MistralMLP``).
            activation: overrides the detected activation ("swiglu", "geglu", "geglu_tanh"
                or "reglu").
            dtype: the GatedMLP's dtype, ``torch.bfloat16`` or ``torch.float16``. Default:
                the module's own dtype, which must then be bf16 or fp16. A Hugging Face
                model loaded without ``torch_dtype=`` is float32: pass
                ``dtype=torch.bfloat16`` to convert it.

        Returns:
            A new GatedMLP on the module's device, its weights copied (the module is left
            as it is).

        Raises:
            TypeError: a projection is missing or not an ``nn.Linear``; the module is not
                bf16/fp16 and no ``dtype`` is given; ``dtype`` is not bf16/fp16.
            ValueError: the activation cannot be detected (pass ``activation=``), or only
                one of gate_proj and up_proj has a bias.
        """
        for name in ("gate_proj", "up_proj", "down_proj"):
            if not isinstance(getattr(mlp, name, None), nn.Linear):
                raise TypeError(f"mlp.{name} must be an nn.Linear (a LlamaMLP-shaped module)")
        activation = activation or _detect_activation(mlp)
        gate_p, up_p, down_p = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        if dtype is None:
            dtype = gate_p.weight.dtype
            if dtype not in DTYPES:
                raise TypeError(
                    f"{type(mlp).__name__} has {dtype} weights and GatedMLP runs in bfloat16 "
                    f"or float16: pass dtype=torch.bfloat16 (or torch.float16) to convert, "
                    f"e.g. GatedMLP.from_llama(mlp, dtype=torch.bfloat16) (Hugging Face "
                    f"models load as float32 unless given torch_dtype=)")
        elif dtype not in DTYPES:
            raise TypeError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
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
