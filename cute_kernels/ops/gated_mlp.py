"""Gated-MLP weights: the interleaved layout the fused gated kernels read.

Convention (the fused gated MLP write-up's): the packed weight ``w_packed (2I, K)`` holds
``up`` row ``i`` at row ``2i`` and ``gate`` row ``i`` at row ``2i + 1``. A GEMM against it puts
each output column's (up, gate) pair in adjacent accumulator columns, which every thread owns
together (layouts.gated_source), so ``act(gate) * up`` is computed in registers and only the
(M, I) result is written.
"""

from __future__ import annotations

import torch

from ..runtime.validate import check_tensor

GATED_ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh", "reglu")
WEIGHT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def pack_gated_weight(w_gate: torch.Tensor, w_up: torch.Tensor | None = None, *,
                      layout: str = "separate") -> torch.Tensor:
    """Interleave gate and up projections into one ``(2I, K)`` weight (up even, gate odd).

    ``layout="separate"``: ``w_gate`` and ``w_up`` are ``(I, K)`` each (``nn.Linear`` weights,
    e.g. Llama's ``gate_proj.weight`` and ``up_proj.weight``). ``layout="concat"``: ``w_gate``
    is one ``(2I, K)`` tensor holding ``[gate; up]`` stacked (a fused ``gate_up_proj``) and
    ``w_up`` is None. Converts once; returns a new contiguous tensor on the input's device.
    """
    if layout == "concat":
        check_tensor("w_gate", w_gate, dtypes=WEIGHT_DTYPES, ndim=2, on_cuda=False)
        if w_up is not None:
            raise ValueError("layout='concat' takes the [gate; up] weight alone: pass w_up=None")
        if w_gate.shape[0] % 2:
            raise ValueError(f"a concatenated [gate; up] weight needs an even number of rows, "
                             f"got {w_gate.shape[0]}")
        w_gate, w_up = w_gate.chunk(2, dim=0)
    elif layout == "separate":
        check_tensor("w_gate", w_gate, dtypes=WEIGHT_DTYPES, ndim=2, on_cuda=False)
        check_tensor("w_up", w_up, dtypes=WEIGHT_DTYPES, ndim=2, on_cuda=False)
        if w_up.shape != w_gate.shape:
            raise ValueError(f"w_gate and w_up must have the same shape, got "
                             f"{tuple(w_gate.shape)} and {tuple(w_up.shape)}")
        if w_up.dtype != w_gate.dtype or w_up.device != w_gate.device:
            raise ValueError("w_gate and w_up must have the same dtype and device")
    else:
        raise ValueError(f"layout must be 'separate' or 'concat', got {layout!r}")
    return torch.stack((w_up, w_gate), dim=1).reshape(-1, w_gate.shape[1])


def unpack_gated_weight(w_packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w_gate, w_up)`` views of an interleaved ``(2I, K)`` weight."""
    check_tensor("w_packed", w_packed, dtypes=WEIGHT_DTYPES, ndim=2, on_cuda=False)
    if w_packed.shape[0] % 2:
        raise ValueError(f"w_packed must have an even number of rows, got {w_packed.shape[0]}")
    return w_packed[1::2], w_packed[0::2]


def gate(up: torch.Tensor, gate_pre: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(gate_pre) * up`` for the named gated activation (any dtype, elementwise)."""
    if activation == "swiglu":
        g = torch.nn.functional.silu(gate_pre)
    elif activation == "geglu":
        g = torch.nn.functional.gelu(gate_pre)
    elif activation == "geglu_tanh":
        g = torch.nn.functional.gelu(gate_pre, approximate="tanh")
    elif activation == "reglu":
        g = torch.relu(gate_pre)
    else:
        raise ValueError(f"activation must be one of {GATED_ACTIVATIONS}, got {activation!r}")
    return g * up


def gated_mlp_up_reference(x: torch.Tensor, w_packed: torch.Tensor,
                           activation: str = "swiglu") -> torch.Tensor:
    """fp32 reference of the fused op: ``act(x @ W_gate^T) * (x @ W_up^T)``, shape (..., I)."""
    w_gate, w_up = unpack_gated_weight(w_packed)
    xf = x.float()
    return gate(xf @ w_up.float().t(), xf @ w_gate.float().t(), activation)


def make_build(path: str, dtype, out_dtype, a_major: str, b_major: str, activation: str):
    """The gated GEMM: the dense GEMM kernel of ``path`` with its gated epilogue."""
    import cutlass

    from ..runtime.bridge import env_stream, fake_mkl
    from ..runtime.compile import Build

    if path == "hopper":
        from ..kernels.gemm_sm90 import GemmSm90 as Kernel
    else:
        from ..kernels.gemm_sm80 import GemmSm80 as Kernel
    kernel = Kernel(a_major=a_major, b_major=b_major, gated=activation)
    return Build(kernel, (fake_mkl(dtype, a_major), fake_mkl(dtype, b_major),
                          fake_mkl(out_dtype, "k"), None, cutlass.Int32(1), env_stream()))


def _gated_mlp_up(x: torch.Tensor, w_packed: torch.Tensor, activation: str = "swiglu",
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``act(x @ W_gate^T) * (x @ W_up^T)`` in one GEMM over the interleaved weight.

    Not yet public: the kernels compile for sm_80 and sm_90a but have not run on a GPU yet
    (tests/test_gated_mlp_gpu.py); issue 4 exposes it once they have.
    """
    from ..runtime.bridge import kernel_for
    from .gemm import _as_mkl, _validate, persistent_ctas

    if activation not in GATED_ACTIVATIONS:
        raise ValueError(f"activation must be one of {GATED_ACTIVATIONS}, got {activation!r}")
    check_tensor("x", x, dtypes=(torch.bfloat16, torch.float16), min_ndim=1, on_cuda=False)
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k)
    check_tensor("w_packed", w_packed, dtypes=(torch.bfloat16, torch.float16), ndim=2,
                 on_cuda=False)
    inter = w_packed.shape[0] // 2
    if w_packed.shape[0] % 16:
        raise ValueError(f"w_packed must have 2I rows with I a multiple of 8 (16-byte output "
                         f"rows), got {w_packed.shape[0]} rows")
    _, out_dtype, a_major, b_major = _validate(x2, w_packed, None, None, None,
                                               a_name="x", b_name="w_packed")
    if out is None:
        out = torch.empty(*lead, inter, dtype=out_dtype, device=x.device)
    elif tuple(out.shape) != (*lead, inter) or out.dtype != out_dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {out_dtype} tensor of shape "
                         f"{(*lead, inter)}")
    if out.numel() == 0:
        return out
    key = ("gated_mlp_up", x.dtype, out_dtype, a_major, b_major, activation)
    kernel = kernel_for(x.device, key, lambda path, target: make_build(
        path, x.dtype, out_dtype, a_major, b_major, activation))
    kernel(_as_mkl(x2), _as_mkl(w_packed), _as_mkl(out.view(-1, inter)), None,
           persistent_ctas(x2, w_packed))
    return out
