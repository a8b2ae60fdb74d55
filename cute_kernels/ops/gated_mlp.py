"""Gated-MLP weights: the interleaved layout the fused gated kernels read.

Convention (that of "Towards Fused Kernels for Gated MLP", the public post on a fused
up-projection + gating kernel in CuTe C++; docs/gated_mlp.md, References): the packed weight
``w_packed (2I, K)`` holds ``up`` row ``i`` at row ``2i`` and ``gate`` row ``i`` at row
``2i + 1``. A GEMM against it puts each output column's (up, gate) pair in adjacent accumulator
columns, which every thread owns together (layouts.gated_source), so ``act(gate) * up`` is
computed in registers and only the (M, I) result is written.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..runtime.arch import device_target, forced_path, sm_count
from ..runtime.bridge import kernel_for
from ..runtime.validate import check_same_device, check_tensor, remember_plan, tensor_meta
from ..tuning.gemm import DEFAULT_CLUSTER_M, DEFAULT_TILE, gated_a_rows
from . import gemm  # its attributes are looked up per call (tests patch schedule/drift_counter)
from .activations import (
    GATED_ACTIVATIONS,
    GATED_TO_ACT,
    activation_and_grad,
    check_activation,
    gate,
)
from .dispatch import KernelOp

WEIGHT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check_weight(name, t):
    check_tensor(name, t, dtypes=WEIGHT_DTYPES, on_cuda=False)
    if t.dim() not in (1, 2):
        raise ValueError(f"{name} must be a 2-D weight (rows, K) or a 1-D bias, got shape "
                         f"{tuple(t.shape)}")


def pack_gated_weight(w_gate: torch.Tensor, w_up: torch.Tensor | None = None, *,
                      layout: str = "separate") -> torch.Tensor:
    """Interleave gate and up projections into one ``(2I, K)`` weight (up even, gate odd).

    The weight layout :func:`gated_mlp_up` and :class:`GatedMLP` read: row ``2i`` is up row
    ``i`` and row ``2i + 1`` is gate row ``i``. Converts once (do it at load time, not per
    call); pure torch, any device, no GPU needed.

    Args:
        w_gate: with ``layout="separate"``, the gate projection ``(I, K)`` (an ``nn.Linear``
            weight, e.g. Llama's ``gate_proj.weight``); with ``layout="concat"``, one
            ``(2I, K)`` tensor holding ``[gate; up]`` stacked, gate first (a fused
            ``gate_up_proj``). A 1-D bias ``(I,)`` / ``(2I,)`` packs the same way.
        w_up: the up projection ``(I, K)``, same shape, dtype and device as ``w_gate``
            (``layout="separate"``); None with ``layout="concat"``.
        layout: "separate" (default) or "concat".

    Returns:
        A new contiguous ``(2I, K)`` (or ``(2I,)``) tensor of the inputs' dtype and device.

    Raises:
        TypeError: a non-tensor, a dtype other than bfloat16, float16 or float32, or one
            tensor without ``w_up`` and without ``layout="concat"``.
        ValueError: an unknown ``layout``, ``w_up`` given with ``layout="concat"``, an odd
            number of rows to split, mismatched shapes, dtypes or devices, or a tensor that
            is neither 1-D nor 2-D.
    """
    if layout == "concat":
        _check_weight("w_gate", w_gate)
        if w_up is not None:
            raise ValueError("layout='concat' takes the [gate; up] weight alone: pass w_up=None")
        if w_gate.shape[0] % 2:
            raise ValueError(f"a concatenated [gate; up] weight needs an even number of rows, "
                             f"got {w_gate.shape[0]}")
        w_gate, w_up = w_gate.chunk(2, dim=0)
    elif layout == "separate":
        _check_weight("w_gate", w_gate)
        if w_up is None:
            rows = w_gate.shape[0]
            raise TypeError(
                f"pack_gated_weight got one tensor (shape {tuple(w_gate.shape)}) and no w_up: "
                f"for a fused [gate; up] weight ({rows} = 2I rows, gate first) pass "
                f"layout=\"concat\"; for separate projections pass both, "
                f"pack_gated_weight(w_gate, w_up)")
        _check_weight("w_up", w_up)
        if w_up.shape != w_gate.shape:
            raise ValueError(f"w_gate and w_up must have the same shape, got "
                             f"{tuple(w_gate.shape)} and {tuple(w_up.shape)}")
        if w_up.dtype != w_gate.dtype or w_up.device != w_gate.device:
            raise ValueError("w_gate and w_up must have the same dtype and device")
    else:
        raise ValueError(f"layout must be 'separate' or 'concat', got {layout!r}")
    return torch.stack((w_up, w_gate), dim=1).reshape(-1, *w_gate.shape[1:])


def unpack_gated_weight(w_packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split an interleaved weight back into its gate and up projections.

    The inverse of :func:`pack_gated_weight` (``layout="separate"``): pure torch, any device,
    no copy.

    Args:
        w_packed: an interleaved ``(2I, K)`` weight (up rows even, gate rows odd) or
            ``(2I,)`` bias, of dtype bfloat16, float16 or float32.

    Returns:
        ``(w_gate, w_up)``: two ``(I, K)`` (or ``(I,)``) strided views of ``w_packed``
        (writing into them writes into ``w_packed``).

    Raises:
        TypeError: not a tensor, or another dtype.
        ValueError: neither 1-D nor 2-D, or an odd number of rows.
    """
    _check_weight("w_packed", w_packed)
    if w_packed.shape[0] % 2:
        raise ValueError(f"w_packed must have an even number of rows, got {w_packed.shape[0]}")
    return w_packed[1::2], w_packed[0::2]


def gated_mlp_up_reference(x: torch.Tensor, w_packed: torch.Tensor,
                           activation: str = "swiglu",
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 reference of the fused op: ``act(x @ W_gate^T + b_gate) * (x @ W_up^T + b_up)``."""
    w_gate, w_up = unpack_gated_weight(w_packed)
    xf = x.float()
    up, gate_pre = xf @ w_up.float().t(), xf @ w_gate.float().t()
    if bias is not None:
        b_gate, b_up = unpack_gated_weight(bias)
        up, gate_pre = up + b_up.float(), gate_pre + b_gate.float()
    return gate(up, gate_pre, activation)


def make_build(path: str, dtype, out_dtype, a_major: str, b_major: str, activation: str,
               bias_dtype=None, cluster_m: int = DEFAULT_CLUSTER_M, tile=DEFAULT_TILE,
               drift: bool = False, batched: bool = True, max_stages: int | None = None,
               a_rows: int | None = None):
    """The gated GEMM: the dense GEMM kernel of ``path`` with its gated epilogue (and the
    bias hook on the 2I pre-activations when ``bias_dtype`` is set); ``batched=False``: plain
    2-D operands (``gemm.gemm_build``); ``max_stages``: the pipeline depth cap and
    ``a_rows``: the A rows loaded per tile, for at most that many rows (Hopper)."""
    from ..kernels.gemm.epilogue import Epilogue

    rows = {"a_rows": a_rows} if path == "hopper" and a_rows is not None else {}
    kernel = gemm.gemm_kernel(path, cluster_m, tile, drift, max_stages, a_major=a_major,
                              b_major=b_major, gated=activation,
                              epilogue=Epilogue(bias=bias_dtype is not None), **rows)
    return gemm.gemm_build(kernel, dtype, out_dtype, a_major, b_major, bias_dtype, drift,
                           batched=batched)


def _validate_gated(x, w_packed, bias, activation):
    check_activation("activation", activation, GATED_ACTIVATIONS)
    check_tensor("x", x, dtypes=(torch.bfloat16, torch.float16), min_ndim=1, on_cuda=False)
    check_tensor("w_packed", w_packed, dtypes=(torch.bfloat16, torch.float16), ndim=2,
                 on_cuda=False)
    if w_packed.shape[0] % 16:
        raise ValueError(f"w_packed must have 2I rows with I a multiple of 8 (16-byte output "
                         f"rows), got {w_packed.shape[0]} rows")
    if x.shape[-1] != w_packed.shape[1]:
        raise ValueError(f"x has K = {x.shape[-1]} features but w_packed has K = "
                         f"{w_packed.shape[1]} columns")


class GatedPlan(NamedTuple):
    """What a direct ``gated_mlp_up`` call launches, worked out once per argument metadata
    (``_PLANS``): a repeat call (a decode step) skips the checks, the schedule and the kernel
    lookup, which cost more host time than a decode-sized GEMM takes on the GPU."""

    inter: int  # I: output columns
    out_dtype: torch.dtype
    kernel: object | None  # None: nothing to launch (an empty output, or K == 0)
    ctas: int = 0
    drift: bool = False  # the wave drift limiter's counter is passed
    flat: bool = False  # Hopper: the 2-D operands go to the kernel as they are (no views)


#: (argument metadata) -> GatedPlan, as ``ops.gemm._PLANS`` for the plain GEMM
_PLANS: dict = {}


def _plan_key(x, w_packed, bias, activation, out) -> tuple:
    """Everything the checks and the schedule read: the tensors' metadata, the activation,
    the forced path and the SM count (an ``SmPartition`` region changes it)."""
    return (tensor_meta(x), tensor_meta(w_packed), tensor_meta(bias), tensor_meta(out),
            activation, forced_path(), sm_count(x.device) if x.is_cuda else 0)


def _plan(x, w_packed, bias, activation, out) -> GatedPlan:
    """Validate, then pick the kernel and launch size."""
    _validate_gated(x, w_packed, bias, activation)
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k)
    inter = w_packed.shape[0] // 2
    _, out_dtype, a_major, b_major = gemm._validate(x2, w_packed, bias, None, None,
                                               a_name="x", b_name="w_packed")
    if out is not None:
        check_tensor("out", out, dtypes=(out_dtype,), on_cuda=False)
        if tuple(out.shape) != (*lead, inter) or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {out_dtype} tensor of shape "
                             f"{(*lead, inter)}, got {tuple(out.shape)}")
        check_same_device(x=x, out=out)
    if math.prod(lead) * inter == 0 or k == 0:
        return GatedPlan(inter, out_dtype, None)
    bias_dtype = bias.dtype if bias is not None else None
    sched = gemm.schedule(x2, w_packed, gated=True)
    tile, cluster_m, ctas, drift = sched[:4]
    # Hopper takes the (M, K) / (2I, K) / (M, I) views as they are and adds their batch mode
    # of one itself (as the plain GEMM's "2d" builds): no views per call
    flat = (forced_path() or device_target(x.device)[0]) == "hopper"
    key = ("gated_mlp_up", x.dtype, out_dtype, a_major, b_major, activation, bias_dtype, drift,
           *(("2d",) if flat else ()))
    a_rows = gated_a_rows(x2.shape[0], tile)
    kernel = kernel_for(x.device, key, lambda path, target: make_build(
        path, x.dtype, out_dtype, a_major, b_major, activation, bias_dtype, cluster_m, tile,
        drift, batched=not flat, max_stages=sched.max_stages, a_rows=a_rows),
        hopper_key=(cluster_m, tile, sched.max_stages)
        + (("a_rows", a_rows) if a_rows is not None else ()))
    return GatedPlan(inter, out_dtype, kernel, ctas, drift, flat)


def _gated_mlp_up(x: torch.Tensor, w_packed: torch.Tensor, bias: torch.Tensor | None,
                  activation: str, out: torch.Tensor | None = None):
    """The direct route: ``act(x @ W_gate^T + b_gate) * (x @ W_up^T + b_up)``, (..., I)."""
    try:
        key = _plan_key(x, w_packed, bias, activation, out)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # arguments of the wrong type: the checks name them
        key = plan = None
    if plan is None:
        plan = _plan(x, w_packed, bias, activation, out)
        if key is not None:
            remember_plan(_PLANS, key, plan)
    return launch(plan, x, w_packed, bias, activation, out)


def launch(plan: GatedPlan, x, w_packed, bias, activation: str, out=None):
    """Run a validated plan on these operands (of the metadata it was made for), into
    ``out`` or a new tensor."""
    inter, k = plan.inter, x.shape[-1]
    if out is None:
        out = torch.empty((*x.shape[:-1], inter), dtype=plan.out_dtype, device=x.device)
    if plan.kernel is None:
        if out.numel():  # K == 0: the pre-activations are the bias (or zero)
            pre = torch.zeros(2 * inter, device=x.device) if bias is None else bias.float()
            out.copy_(gate(pre[0::2], pre[1::2], activation).expand_as(out))
        return out
    x2 = x if x.dim() == 2 else x.reshape(-1, k)
    out2 = out if out.dim() == 2 else out.view(-1, inter)
    if not plan.flat:  # the Ampere kernel's (rows, K, L) operands
        x2, w_packed, out2 = gemm._as_mkl(x2), gemm._as_mkl(w_packed), gemm._as_mkl(out2)
    plan.kernel(*gemm.gemm_params().call_args(
        mA=x2, mB=w_packed, mC=out2, mBias=bias, num_ctas=plan.ctas,
        mSync=gemm.drift_counter(x.device, plan.drift)))
    return out


@torch.library.custom_op("cute_kernels::gated_mlp_up", mutates_args=())
def _gated_mlp_up_op(x: torch.Tensor, w_packed: torch.Tensor, bias: torch.Tensor | None,
                     activation: str) -> torch.Tensor:
    return _gated_mlp_up(x, w_packed, bias, activation)


@_gated_mlp_up_op.register_fake
def _(x, w_packed, bias, activation):
    return x.new_empty((*x.shape[:-1], w_packed.shape[0] // 2))


def _gated_setup(ctx, inputs, output):
    x, w_packed, bias, activation = inputs
    ctx.save_for_backward(x, w_packed, bias)
    ctx.activation = activation


def _gated_backward(ctx, grad):
    """Recomputes the 2I pre-activations (fp32, one GEMM) instead of keeping them; the
    dgrad/wgrad GEMMs go through torch. Not fused yet."""
    x, w_packed, bias = ctx.saved_tensors
    k = x.shape[-1]
    x2 = x.reshape(-1, k)
    pre = gemm.linear(x2, w_packed, bias, out_dtype=torch.float32) if k else \
        torch.zeros(x2.shape[0], w_packed.shape[0], device=x.device)
    up, gate_pre = pre[:, 0::2], pre[:, 1::2]
    g = grad.reshape(-1, grad.shape[-1]).float()
    act_gate, d_gate = activation_and_grad(gate_pre, GATED_TO_ACT[ctx.activation], g * up)
    d_pre = torch.stack((g * act_gate, d_gate), dim=-1).reshape(pre.shape).to(x.dtype)
    dx = (d_pre @ w_packed).reshape(x.shape) if ctx.needs_input_grad[0] else None
    dw = d_pre.t() @ x2 if ctx.needs_input_grad[1] else None
    dbias = None
    if bias is not None and ctx.needs_input_grad[2]:
        dbias = d_pre.float().sum(0).to(bias.dtype)
    return dx, dw, dbias, None


_gated_mlp_up_op.register_autograd(_gated_backward, setup_context=_gated_setup)

_GATED_MLP_UP = KernelOp(_gated_mlp_up_op, _gated_mlp_up, grad_inputs=("x", "w_packed", "bias"),
                         differentiable=True, check=_validate_gated)


def gated_mlp_up(x: torch.Tensor, w_packed: torch.Tensor, *, activation: str = "swiglu",
                 bias: torch.Tensor | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """``act(x @ W_gate^T + b_gate) * (x @ W_up^T + b_up)`` in one GEMM, shape (..., I).

    The up-projection of a gated MLP (SwiGLU, GeGLU, ReGLU) in one kernel launch. The
    (M, 2I) pre-activations never reach memory: each thread gates its own (up, gate)
    accumulator pairs in fp32 and only the (M, I) result is written. Differentiable (the
    backward recomputes the pre-activations rather than storing them).

    Args:
        x: (..., K) bfloat16 or float16 activations on a CUDA device; any number of rows
            (leading dims are flattened, copying only if they cannot be viewed so).
        w_packed: (2I, K) weight of x's dtype from :func:`pack_gated_weight` (up rows
            even, gate rows odd); K and I multiples of 8.
        activation: "swiglu" (SiLU gate, Llama; default), "geglu" (erf GELU),
            "geglu_tanh" (tanh GELU) or "reglu" (ReLU).
        bias: optional (2I,) bias interleaved the same way
            (``pack_gated_weight(b_gate, b_up)``), x's dtype or float32.
        out: optional contiguous (..., I) tensor of x's dtype to write into (not with
            autograd).

    Returns:
        (..., I) in x's dtype (``out`` itself when given).

    Raises:
        TypeError: a non-tensor, a dtype other than bfloat16/float16, or x and w_packed
            of different dtypes.
        ValueError: an unknown ``activation``, x's K not w_packed's, I or K not a multiple
            of 8, a bad ``bias`` or ``out`` shape, or CPU tensors
            (``cute_kernels.reference.gated_mlp_up`` runs anywhere).
        UnsupportedGPUError: a GPU without a kernel path.
    """
    return _GATED_MLP_UP(x, w_packed, bias, activation, out=out)
