"""``gemm`` / ``linear``: the torch API of the dense GEMM kernels.

Canonical form handed to a kernel: ``mA (M, K, L)``, ``mB (N, K, L)``, ``mC (M, N, L)`` with
``C = A @ B^T`` per batch ``l``. ``gemm(a, b)`` passes ``b`` as ``b.transpose(-1, -2)`` and
``linear(x, w)`` passes ``w`` as it is, so both majors of both operands reach the kernel as
strided views, never copies; the kernel variant is chosen from the strides (K-major or
M/N-major per operand) and is part of the compile-cache key.
"""

from __future__ import annotations

import functools
import logging
import math
from functools import partial
from typing import NamedTuple

import torch

from ..kernels.common.activation_names import ACTIVATIONS
from ..kernels.common.tile_scheduler import stream_k_workspace_words
from ..runtime.arch import device_target, forced_path, sm_count
from ..runtime.bridge import fake_mkl, fake_vector, kernel_for
from ..runtime.compile import Build
from ..runtime.launch import KernelParams, kernel_params, launch_args
from ..runtime.validate import (
    check_aligned,
    check_cuda,
    check_same_device,
    check_tensor,
    dtype_names,
    remember_plan,
    tensor_meta,
)
from ..tuning import gemm as gemm_tuning
from ..tuning.gemm import DEFAULT_CLUSTER_M, DEFAULT_TILE
from .activations import activation, activation_and_grad
from .dispatch import KernelOp, plain_eager

#: ``logging.getLogger("cute_kernels.gemm").setLevel("DEBUG")`` prints each new plan's
#: schedule (tile, swap-AB, split-K); ``cute-kernels schedule M N K`` prints it without a GPU
_LOG = logging.getLogger("cute_kernels.gemm")

IN_DTYPES = (torch.bfloat16, torch.float16)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _major(name: str, t: torch.Tensor, outer: str) -> str:
    """'k' when the K (last) dim has unit stride, else ``outer`` when the other one has."""
    if t.shape[-1] == 1 or t.stride(-1) == 1:
        return "k"
    if t.shape[-2] == 1 or t.stride(-2) == 1:
        return outer
    raise ValueError(f"{name} must have unit stride in one of its last two dimensions "
                     f"(row- or column-major), got strides {tuple(t.stride())}")


def _as_mkl(t: torch.Tensor) -> torch.Tensor:
    """(..., R, K) with at most one batch dim -> an (R, K, L) view."""
    return t.unsqueeze(-1) if t.dim() == 2 else t.permute(1, 2, 0)


def _validate(a, b_nk, bias, out, out_dtype, *, a_name: str, b_name: str):
    check_tensor(a_name, a, dtypes=IN_DTYPES, on_cuda=False)
    check_tensor(b_name, b_nk, dtypes=IN_DTYPES, on_cuda=False)
    if a.dim() not in (2, 3) or b_nk.dim() not in (2, 3):
        raise ValueError(f"{a_name} and {b_name} must be 2-D, or 3-D with a leading batch "
                         f"dim; got {tuple(a.shape)} and {tuple(b_nk.shape)}")
    if b_nk.dtype != a.dtype:
        raise TypeError(f"{a_name} and {b_name} must have the same dtype, got {a.dtype} and "
                        f"{b_nk.dtype}")
    if a.dim() != b_nk.dim() or (a.dim() == 3 and a.shape[0] != b_nk.shape[0]):
        raise ValueError(f"batch dims differ: {a_name} {tuple(a.shape)}, {b_name} "
                         f"{tuple(b_nk.shape)} (batched GEMM needs the same leading dim)")
    m, k = a.shape[-2:]
    n, kb = b_nk.shape[-2:]
    if k != kb:
        raise ValueError(f"inner dimensions differ: {a_name} has K = {k}, {b_name} has K = {kb}")
    if k % 8 or n % 8:
        raise ValueError(f"N and K must be multiples of 8 (16-byte TMA rows), got N = {n}, "
                         f"K = {k}")
    out_dtype = out_dtype or (out.dtype if out is not None else a.dtype)
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be {dtype_names(OUT_DTYPES)}, got {out_dtype}")
    a_major = _major(a_name, a, "m")
    b_major = _major(b_name, b_nk, "n")
    shape = (*a.shape[:-2], m, n)
    if bias is not None:
        check_tensor("bias", bias, dtypes=(a.dtype, torch.float32), ndim=1, on_cuda=False)
        if bias.shape[0] != n:
            raise ValueError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
        if bias.stride(0) != 1 and n > 1:
            raise ValueError("bias must be contiguous")
    if out is not None:
        check_tensor("out", out, dtypes=(out_dtype,), on_cuda=False)
        if tuple(out.shape) != shape:
            raise ValueError(f"out must have shape {shape}, got {tuple(out.shape)}")
        if n > 1 and out.stride(-1) != 1:
            raise ValueError("out must be row-major (stride(-1) == 1)")
        for dim in range(out.dim() - 1):
            if out.shape[dim] > 1 and out.stride(dim) % 8:
                raise ValueError(f"out.stride({dim}) must be a multiple of 8 elements (the "
                                 f"kernels store whole 16-byte rows), got {out.stride(dim)}")
    for name, t in ((a_name, a), (b_name, b_nk), ("out", out)):
        if t is not None:
            check_cuda(name, t)
            check_aligned(name, t)
    check_same_device(**{a_name: a, b_name: b_nk},
                      **({"bias": bias} if bias is not None else {}),
                      **({"out": out} if out is not None else {}))
    return shape, out_dtype, a_major, b_major


def gemm_kernel(path: str, cluster_m: int = DEFAULT_CLUSTER_M, tile=DEFAULT_TILE,
                drift: bool = False, max_stages: int | None = None, cluster_k: int = 1,
                cluster_n: int = 1, stream_k: bool = False, pdl: bool = False,
                pingpong: bool = False, **config):
    """The GEMM kernel object of a path; ``cluster_m``, ``cluster_n``, ``tile``, ``drift``
    (the wave drift limiter, see ``schedule``), ``cluster_k`` (split-K in a cluster),
    ``pingpong`` (a tile per consumer warpgroup) and ``stream_k`` concern the Hopper
    kernel (the Ampere kernel has its own tile and takes the drift counter argument without
    using it)."""
    if path == "hopper":
        from ..kernels.gemm.sm90 import GemmSm90

        stages = {} if max_stages is None else {"max_stages": max_stages}
        split = {} if cluster_k == 1 else {"cluster_k": cluster_k}
        along_n = {} if cluster_n == 1 else {"cluster_n": cluster_n}
        streamed = {"stream_k": True} if stream_k else {}
        dependent = {"pdl": True} if pdl else {}
        alternating = {"pingpong": True} if pingpong else {}
        return GemmSm90(cluster_m=cluster_m, tile=tile, drift_slack=0 if drift else None,
                        **stages, **split, **along_n, **streamed, **dependent, **alternating,
                        **config)
    from ..kernels.gemm.sm80 import GemmSm80

    return GemmSm80(**config)


def make_build(path: str, dtype, out_dtype, a_major: str, b_major: str, epilogue,
               bias_dtype=None, cluster_m: int = DEFAULT_CLUSTER_M,
               tile=DEFAULT_TILE, drift: bool = False, max_stages: int | None = None,
               batched: bool = True, c_transposed: bool = False, cluster_k: int = 1,
               cluster_n: int = 1, stream_k: bool = False, pdl: bool = False,
               pingpong: bool = False) -> Build:
    """The GEMM kernel of ``path`` against fake operands (``gemm_build``); ``c_transposed``
    (Hopper): C is the row-major output of a swap-AB launch, stored transposed;
    ``cluster_k`` (Hopper): split-K over a cluster's CTAs, reduced in the launch;
    ``cluster_n`` (Hopper): CTAs along N sharing A tiles; ``stream_k`` (Hopper): the last
    wave shared out by k-ranges, ``mSync`` its workspace; ``pingpong`` (Hopper): each consumer
    warpgroup its own tile."""
    if epilogue.bias and bias_dtype is None:
        raise ValueError("a bias epilogue needs the bias dtype (bias_dtype)")
    kernel = gemm_kernel(path, cluster_m, tile, drift, max_stages, cluster_k, cluster_n,
                         stream_k, pdl and path == "hopper", pingpong and path == "hopper",
                         a_major=a_major, b_major=b_major,
                         epilogue=epilogue,
                         **({"c_transposed": True} if c_transposed else {}))
    return gemm_build(kernel, dtype, out_dtype, a_major, b_major,
                      bias_dtype if epilogue.bias else None, drift, batched, stream_k)


def gemm_build(kernel, dtype, out_dtype, a_major: str, b_major: str, bias_dtype,
               drift: bool, batched: bool = True, stream_k: bool = False) -> Build:
    """A GEMM-kernel object (dense or gated) against canonical (rows, K, L) fake operands, a
    bias when ``bias_dtype`` is set, a CTA count and, with the drift limiter, its int32 tile
    counter (left out otherwise: the kernel's default).

    C is row-major, N a multiple of 8 (an unsplit swap-AB launch writes its output as
    ``batched=False`` rows seen transposed, ``make_build(c_transposed=True)``; the split
    launches' fp32 workspace views are made in ``split_build``'s host function).
    ``stream_k`` (Hopper): ``mSync`` is the stream-K workspace, int32 words of any count
    (``tile_scheduler.stream_k_workspace_words``).
    ``batched=False`` (row-major C): plain (rows, K) and (M, N) operands, which the kernels
    give their batch mode of one (no host-side views per call)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ..runtime.bridge import sym

    bias = fake_vector(bias_dtype, align=4, divisibility=8) if bias_dtype is not None else None
    return Build(kernel, launch_args(
        kernel, mA=fake_mkl(dtype, a_major, batched), mB=fake_mkl(dtype, b_major, batched),
        mC=fake_mkl(out_dtype, "k", batched), mBias=bias, num_ctas=cutlass.Int32(1),
        **({"mSync": make_fake_compact_tensor(cutlass.Int32, (sym() if stream_k else 1,),
                                              assumed_align=16 if stream_k else 4)}
           if drift or stream_k else {})))


def split_build(path: str, dtype, out_dtype, a_major: str, b_major: str, swap: bool,
                epilogue, bias_dtype, cluster_m: int, tile, max_stages: int | None) -> Build:
    """The split-K / swap-AB GEMM into the fp32 workspace and its reduce, one host call
    (``SplitKGemm``), against plain 2-D x (M, K) and w (N, K) of the given majors, a flat
    workspace and a row-major output."""
    import cutlass

    from ..kernels.gemm.split_k import SplitKGemm
    from ..kernels.gemm.split_reduce import SplitKReduce

    lhs_major, rhs_major = (_flip(b_major), _flip(a_major)) if swap else (a_major, b_major)
    gemm = gemm_kernel(path, cluster_m, tile, False, max_stages, a_major=lhs_major,
                       b_major=rhs_major, epilogue=_epilogue(False, None))
    joint = SplitKGemm(gemm, SplitKReduce(epilogue), swap)
    bias = fake_vector(bias_dtype, align=4, divisibility=8) if bias_dtype is not None else None
    return Build(joint, launch_args(
        joint, mX=fake_mkl(dtype, a_major, False), mW=fake_mkl(dtype, b_major, False),
        mWs=fake_vector(torch.float32, align=16, divisibility=8), mOut=_fake_rows(out_dtype),
        mBias=bias, splits=cutlass.Int32(2), num_ctas=cutlass.Int32(1)))


def _fake_rows(dtype):
    """A row-major (M, N) output: rows of 8-element multiples, 16-byte aligned (``_plan``
    routes other outputs around the reduce)."""
    from cutlass.cute.runtime import make_fake_tensor

    from ..runtime.bridge import cutlass_dtype, sym

    return make_fake_tensor(cutlass_dtype(dtype), (sym(), sym(8)), (sym(8), 1),
                            assumed_align=16)


#: The GEMM kernel classes (dense and gated), as ``"module:Class"``.
GEMM_KERNELS = ("cute_kernels.kernels.gemm.sm90:GemmSm90",
                "cute_kernels.kernels.gemm.sm80:GemmSm80")


@functools.cache
def gemm_params() -> KernelParams:
    """The runtime parameters shared by both paths' GEMM kernels (dense and gated), named by
    path so a call never imports the DSL (:mod:`~cute_kernels.runtime.launch`)."""
    return kernel_params(*GEMM_KERNELS)


def drift_counter(device: torch.device, drift: bool):
    """The launch's ``mSync`` argument: a zeroed int32 tile counter when the limiter is on,
    else None (passed explicitly: a kernel loaded from the disk cache takes no defaults)."""
    return torch.zeros(1, dtype=torch.int32, device=device) if drift else None


def stream_k_workspace(device: torch.device, words: tuple[int, int]) -> torch.Tensor:
    """A stream-K launch's ``mSync``: ``words`` = (int32 words, offset of the flags)
    (``tile_scheduler.stream_k_workspace_words``), the flags zeroed; the partials need no
    clearing (each is written before it is read). From the caching allocator, in stream
    order: concurrent launches on other streams get their own."""
    total, flags = words
    ws = torch.empty(total, dtype=torch.int32, device=device)
    ws[flags:].zero_()
    return ws


#: The split-K / swap-AB GEMM with its reduce (one host call).
SPLIT_KERNEL = "cute_kernels.kernels.gemm.split_k:SplitKGemm"


@functools.cache
def split_params() -> KernelParams:
    return kernel_params(SPLIT_KERNEL)


class GemmPlan(NamedTuple):
    """What a validated call resolved to: the output, the kernel and its launch size."""

    shape: tuple
    out_dtype: torch.dtype
    kernel: object  # the compiled kernel; None when there is nothing to launch
    ctas: int
    drift: bool
    workspace: int = 0  # split-K / swap-AB through the workspace: its fp32 words (SplitKGemm)
    swap: bool = False
    splits: int = 1
    flat: bool = False  # the kernel takes the plain 2-D operands (no (rows, K, 1) views)
    stream_k: tuple | None = None  # a stream-K launch's workspace (int32 words, flag offset)


#: (argument metadata) -> GemmPlan: a call whose tensors have the
#: same shapes, strides, dtypes, device and 16-byte alignment as a validated earlier call skips
#: validation and scheduling (tens of µs of Python, more than a small GEMM's runtime).
_PLANS: dict = {}


def _gemm_nk(a, b_nk, bias, out_dtype, epilogue, out=None, *, names=("a", "b")):
    """The direct route: ``act(a @ b_nk^T + bias)`` into ``out`` (or a new tensor); ``names``
    are the operands' names in error messages."""
    try:
        sig = _plan_key(a, b_nk, bias, out, out_dtype, epilogue)
        plan = _PLANS.get(sig)
    except (AttributeError, TypeError):  # arguments of the wrong type: the checks name them
        sig = plan = None
    if plan is None:
        plan = _plan(a, b_nk, bias, out, out_dtype, epilogue, *names)
        if plan.kernel is None:  # empty output or K == 0: no kernel
            return _degenerate(a, bias, out, plan, epilogue)
        if sig is not None:
            remember_plan(_PLANS, sig, plan)
    return launch(plan, a, b_nk, bias, out)


def _plan_key(a, b_nk, bias, out, out_dtype, epilogue) -> tuple:
    """What a plan is cached on (``_PLANS``); the SM count sizes its persistent grid (an
    ``SmPartition`` region changes it)."""
    return (tensor_meta(a), tensor_meta(b_nk), tensor_meta(bias), tensor_meta(out), out_dtype,
            epilogue, forced_path(), sm_count(a.device) if a.is_cuda else 0)


def launch(plan: GemmPlan, a, b_nk, bias, out=None):
    """Run a validated plan on these operands (of the metadata it was made for), into
    ``out`` or a new tensor."""
    if out is None:
        out = torch.empty(plan.shape, dtype=plan.out_dtype, device=a.device)
    if plan.workspace:  # split-K launches (swapped or not): the GEMM and the reduce
        ws = torch.empty(plan.workspace, dtype=torch.float32, device=a.device)
        plan.kernel(*split_params().call_args(mX=a, mW=b_nk, mWs=ws, mOut=out, mBias=bias,
                                              splits=plan.splits, num_ctas=plan.ctas))
        return out
    if plan.swap:  # C^T = W X^T stored into out, which the kernel sees transposed
        sync = None if plan.stream_k is None else stream_k_workspace(a.device, plan.stream_k)
        plan.kernel(*gemm_params().call_args(
            mA=b_nk, mB=a, mC=out, mBias=bias, num_ctas=plan.ctas, mSync=sync))
        return out
    sync = (drift_counter(a.device, plan.drift) if plan.stream_k is None
            else stream_k_workspace(a.device, plan.stream_k))
    if plan.flat:  # the kernel adds the batch mode of one itself
        plan.kernel(*gemm_params().call_args(
            mA=a, mB=b_nk, mC=out, mBias=bias, num_ctas=plan.ctas, mSync=sync))
        return out
    plan.kernel(*gemm_params().call_args(
        mA=_as_mkl(a), mB=_as_mkl(b_nk), mC=_as_mkl(out), mBias=bias, num_ctas=plan.ctas,
        mSync=sync))
    return out


def _launch_cached(a, b_nk, bias, out, out_dtype, epilogue):
    """A repeat eager call launched straight from the plan an earlier call with the same
    metadata made, skipping the argument checks and the route (µs that a decode-sized GEMM
    cannot hide); None when there is no such plan or this call would not take the direct
    route (``plain_eager``). 2-D operands only."""
    if (not isinstance(a, torch.Tensor) or not isinstance(b_nk, torch.Tensor)
            or not plain_eager((a, b_nk, bias, out), (a, b_nk, bias)) or a.dim() != 2):
        return None
    out_dtype = out_dtype or (out.dtype if out is not None else a.dtype)
    try:
        plan = _PLANS.get(_plan_key(a, b_nk, bias, out, out_dtype, epilogue))
    except (AttributeError, TypeError):  # an argument of the wrong type: the checks name it
        return None
    return None if plan is None else launch(plan, a, b_nk, bias, out)


def _plan(a, b_nk, bias, out, out_dtype, epilogue, a_name, b_name) -> GemmPlan:
    """Validate, then pick the kernel and launch size (kernel None: nothing to launch)."""
    if epilogue not in ACTIVATIONS:
        raise ValueError(f"epilogue must be one of {ACTIVATIONS}, got {epilogue!r}")
    shape, out_dtype, a_major, b_major = _validate(a, b_nk, bias, out, out_dtype,
                                                   a_name=a_name, b_name=b_name)
    if math.prod(shape) == 0 or a.shape[-1] == 0:
        return GemmPlan(shape, out_dtype, None, 0, False)
    plan = schedule(a, b_nk)
    _LOG.debug("gemm %s x %s: %s", tuple(a.shape), tuple(b_nk.shape), plan.describe())
    bias_dtype = bias.dtype if bias is not None else None
    hopper = (forced_path() or device_target(a.device)[0]) == "hopper"
    if plan.cluster_k > 1 and out_dtype == torch.float32:  # the cluster split stores 16 bits
        plan = schedule(a, b_nk, cluster_split=False)
    if plan.stream_k and not hopper:  # the Ampere kernel walks whole tiles
        plan = plan._replace(stream_k=False)
    if plan.pingpong and (out_dtype == torch.float32 or not hopper):
        # an fp32 C tile per consumer warpgroup leaves no smem for the stages
        plan = plan._replace(pingpong=False)
    tile, cluster_m, ctas, drift = plan.tile, plan.cluster_m, plan.ctas, plan.drift
    if plan.skinny and hopper:
        out_rows = out.stride(0) if out is not None else shape[-1]
        if plan.splits == 1 and a.dim() == 2 and out_rows % 8 == 0:
            return _swap_plan(a, out_dtype, epilogue, bias_dtype, shape, plan, a_major,
                              b_major)
        return _workspace_plan(a, b_nk, out_dtype, epilogue, bias_dtype, shape, plan,
                               a_major, b_major)
    # Hopper: 2-D operands reach the kernel as they are (it adds the batch mode of one), no
    # views per call (the Ampere kernel keeps its (rows, K, L) operands: its 2-D build
    # compiles to other address arithmetic, not measured)
    flat = a.dim() == 2 and hopper
    # drift changes the launch signature on both paths, so it joins the common key (stream-K,
    # Hopper only, its Hopper key); the epilogue is keyed by its fields (the Epilogue class
    # lives with the DSL code)
    key = ("gemm", a.dtype, out_dtype, a_major, b_major, bias is not None, epilogue, bias_dtype,
           drift, *(("2d",) if flat else ()))
    kernel = kernel_for(a.device, key, lambda path, target: make_build(
        path, a.dtype, out_dtype, a_major, b_major,
        _epilogue(bias=bias_dtype is not None, activation=epilogue), bias_dtype, cluster_m,
        tile, drift, plan.max_stages, batched=not flat, cluster_k=plan.cluster_k,
        cluster_n=plan.cluster_n, stream_k=plan.stream_k, pdl=plan.pdl, pingpong=plan.pingpong),
        hopper_key=(cluster_m, tile, plan.max_stages, plan.cluster_k)
        + ((plan.cluster_n,) if plan.cluster_n > 1 else ())
        + (("stream_k",) if plan.stream_k else ()) + (("pdl",) if plan.pdl else ())
        + (("pingpong",) if plan.pingpong else ()))
    words = stream_k_workspace_words(ctas, tile[0], tile[1]) if plan.stream_k else None
    return GemmPlan(shape, out_dtype, kernel, ctas, drift, flat=flat, stream_k=words)


def _swap_plan(a, out_dtype, epilogue, bias_dtype, shape, sched, a_major,
               b_major) -> GemmPlan:
    """Swap-AB without split-K, in one launch: the kernel computes C^T = W X^T with the
    weight's rows as its M and stores C^T straight into ``out`` seen column-major (rows of 8
    elements' multiples: TMA's stride rule), the epilogue adding the bias per C^T row. Saves
    the fp32 workspace, the reduce's launch and its pass over C (decode shapes). With
    ``sched.stream_k`` the CTAs share the tiles' k-ranges and add each other's partials in
    the launch (stream_k.py): K split without a second launch."""
    lhs_major, rhs_major = _flip(b_major), _flip(a_major)
    key = ("gemm_swap", a.dtype, out_dtype, lhs_major, rhs_major, epilogue, bias_dtype, "2d")
    # the plain 2-D operands and output (the kernel sees out transposed): no views per call
    kernel = kernel_for(a.device, key, lambda path, target: make_build(
        path, a.dtype, out_dtype, lhs_major, rhs_major,
        _epilogue(bias_dtype is not None, epilogue, bias_dim=0), bias_dtype,
        sched.cluster_m, sched.tile, False, sched.max_stages, batched=False,
        c_transposed=True, stream_k=sched.stream_k, pdl=sched.pdl),
        hopper_key=(sched.cluster_m, sched.tile, sched.max_stages)
        + (("stream_k",) if sched.stream_k else ()) + (("pdl",) if sched.pdl else ()))
    words = (stream_k_workspace_words(sched.ctas, sched.tile[0], sched.tile[1])
             if sched.stream_k else None)
    return GemmPlan(shape, out_dtype, kernel, sched.ctas, False, swap=True, flat=True,
                    stream_k=words)


def _workspace_plan(a, b_nk, out_dtype, epilogue, bias_dtype, shape, sched, a_major,
                    b_major) -> GemmPlan:
    """The swap-AB / split-K plan: an fp32 GEMM into the workspace (operands swapped when
    ``sched.swap``) and the reduce kernel with the epilogue, from one host call."""
    key = ("gemm_split", a.dtype, out_dtype, a_major, b_major, sched.swap, epilogue,
           bias_dtype)
    kernel = kernel_for(a.device, key, lambda path, target: split_build(
        path, a.dtype, out_dtype, a_major, b_major, sched.swap,
        _epilogue(bias_dtype is not None, epilogue), bias_dtype, sched.cluster_m, sched.tile,
        sched.max_stages), hopper_key=(sched.cluster_m, sched.tile, sched.max_stages))
    m, n = shape
    return GemmPlan(shape, out_dtype, kernel, sched.ctas, False,
                    workspace=workspace_words(m, n, sched.splits), swap=sched.swap,
                    splits=sched.splits)


def workspace_words(m: int, n: int, splits: int) -> int:
    """The fp32 words of a split launch's workspace: ``splits`` slices of M rows of N
    rounded up to 8 (``kernels/gemm/split_k.py``'s layout)."""
    return splits * m * (-(-n // 8) * 8)


def _flip(major: str) -> str:
    """An operand's major once it plays the other role: K stays K, M <-> N."""
    return {"k": "k", "m": "n", "n": "m"}[major]


def _epilogue(bias: bool, activation, bias_dim: int = 1):
    from ..kernels.gemm.epilogue import Epilogue

    return Epilogue(bias=bias, activation=activation, bias_dim=bias_dim)


def _degenerate(a, bias, out, plan: GemmPlan, epilogue):
    if out is None:
        out = torch.empty(plan.shape, dtype=plan.out_dtype, device=a.device)
    if out.numel() and a.shape[-1] == 0:  # K == 0: the product is zero; the epilogue applies
        out.copy_(_epilogue_reference(torch.zeros(plan.shape, device=a.device), bias, epilogue))
    return out


def schedule(a: torch.Tensor, b_nk: torch.Tensor, *, skinny: bool = True,
             cluster_split: bool = True, gated: bool = False) -> gemm_tuning.GemmSchedule:
    """The Hopper launch for these operands (``tuning.gemm.schedule`` on this device;
    ``skinny=False``: never swap-AB or split-K; ``cluster_split=False``: K slices only
    through the fp32 workspace; ``gated``: the gated GEMM's, never swapped or split)."""
    batch = a.shape[0] if a.dim() == 3 else 1
    # the K slices of split-K are the launch's batch dim: 2-D operands only
    return gemm_tuning.schedule(a.shape[-2], b_nk.shape[-2], a.shape[-1], batch,
                                sm_count(a.device), skinny=skinny and not gated
                                and a.dim() == 2, cluster_split=cluster_split, gated=gated)


def _epilogue_reference(acc: torch.Tensor, bias, epilogue):
    """fp32 ``act(acc + bias)``: the reference of the epilogue."""
    acc = acc.float()
    if bias is not None:
        acc = acc + bias.float()
    return activation(acc, epilogue)


@torch.library.custom_op("cute_kernels::gemm_nk", mutates_args=())
def _gemm_nk_op(a: torch.Tensor, b_nk: torch.Tensor, bias: torch.Tensor | None,
                out_dtype: torch.dtype, epilogue: str | None) -> torch.Tensor:
    return _gemm_nk(a, b_nk, bias, out_dtype, epilogue)


@_gemm_nk_op.register_fake
def _(a, b_nk, bias, out_dtype, epilogue):
    return a.new_empty((*a.shape[:-1], b_nk.shape[-2]), dtype=out_dtype)


def _gemm_setup(ctx, inputs, output):
    a, b_nk, bias, _, epilogue = inputs
    ctx.save_for_backward(a, b_nk, bias)
    ctx.epilogue = epilogue


def _gemm_backward(ctx, grad):
    """Plain GEMMs on the gradient; with an activation, the pre-activations are recomputed
    (fp32) rather than saved. The dgrad/wgrad GEMMs go through torch (any M, any dtype)."""
    a, b_nk, bias = ctx.saved_tensors
    if ctx.epilogue is not None:
        pre = _gemm_nk_op(a, b_nk, bias, torch.float32, None)
        _, grad = activation_and_grad(pre, ctx.epilogue, grad.float())
    grad = grad.to(a.dtype)
    da = grad @ b_nk if ctx.needs_input_grad[0] else None
    db = grad.transpose(-1, -2) @ a if ctx.needs_input_grad[1] else None
    dbias = None
    if bias is not None and ctx.needs_input_grad[2]:
        dbias = grad.float().reshape(-1, grad.shape[-1]).sum(0).to(bias.dtype)
    return da, db, dbias, None, None


_gemm_nk_op.register_autograd(_gemm_backward, setup_context=_gemm_setup)


def _check_nk(a, b_nk, bias, out_dtype, epilogue, *, names=("a", "b")):
    """Validation before the autograd route (the direct route validates in ``_plan``)."""
    _validate(a, b_nk, bias, None, out_dtype, a_name=names[0], b_name=names[1])


def _gemm_op(names: tuple[str, str]) -> KernelOp:
    return KernelOp(_gemm_nk_op, partial(_gemm_nk, names=names),
                    grad_inputs=("a", "b_nk", "bias"), differentiable=True,
                    check=partial(_check_nk, names=names))


#: gemm and linear: one custom op, the operands named as each function names them
_GEMM, _LINEAR = _gemm_op(("a", "b")), _gemm_op(("x", "w"))


def _out_dtype(out_dtype, out, a):
    """The output dtype: as given, else ``out``'s, else the input's (checked later)."""
    if out_dtype is not None:
        return out_dtype
    return out.dtype if out is not None else getattr(a, "dtype", None)


def gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
         out_dtype: torch.dtype | None = None, bias: torch.Tensor | None = None,
         epilogue: str | None = None) -> torch.Tensor:
    """``act(a @ b + bias)`` for ``a (M, K)``, ``b (K, N)`` (or both with a leading batch dim).

    One kernel launch: fp32 accumulation on the tensor cores, the bias and activation applied
    in the epilogue, one rounding to the output dtype. Either operand may be row- or
    column-major (``b.t()`` of a contiguous (N, K) weight reaches the kernel without a copy).
    Differentiable (the backward's GEMMs run in torch).

    Args:
        a: (M, K) or (L, M, K), bfloat16 or float16, on a CUDA device. Any M.
        b: (K, N) or (L, K, N), a's dtype; N and K multiples of 8. Both operands need a
            unit stride in one of their last two dims and 16-byte aligned data pointers.
        out: optional row-major tensor of the result's shape and dtype to write into (not
            with autograd).
        out_dtype: bfloat16, float16 or float32; default ``out``'s dtype, else a's.
        bias: optional (N,) contiguous vector, a's dtype or float32, added before the
            activation.
        epilogue: None, "relu", "gelu" (erf), "gelu_tanh" or "silu", applied to
            ``a @ b + bias`` in fp32.

    Returns:
        (M, N) or (L, M, N) in ``out_dtype`` (``out`` itself when given).

    Raises:
        TypeError: a non-tensor, a dtype outside the lists above, or a and b of different
            dtypes.
        ValueError: mismatched K or batch dims, N or K not a multiple of 8, an operand with
            no unit-stride dim or misaligned, a bad ``bias``/``out`` shape, an unknown
            ``epilogue``, or CPU tensors (the references in :mod:`cute_kernels.reference`
            run anywhere).
        UnsupportedGPUError: a GPU without a kernel path (neither sm_80/86/87/89 nor
            sm_90).
    """
    if isinstance(b, torch.Tensor) and b.dim() == 2:  # _launch_cached checks the rest
        y = _launch_cached(a, b.t(), bias, out, out_dtype, epilogue)
        if y is not None:
            return y
    check_tensor("b", b, dtypes=IN_DTYPES, on_cuda=False)
    if b.dim() < 2:
        raise ValueError(f"b must be 2-D or 3-D, got shape {tuple(b.shape)}")
    return _GEMM(a, b.transpose(-1, -2), bias, _out_dtype(out_dtype, out, a), epilogue,
                 out=out)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
           out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
           epilogue: str | None = None) -> torch.Tensor:
    """``act(x @ w.T + bias)``, like ``torch.nn.functional.linear`` with a fused activation.

    The same kernel as :func:`gemm` with ``w`` as an ``nn.Linear`` weight (N, K), read
    without a transpose copy. Leading dims of ``x`` are flattened into M when they can be
    viewed so (else copied once). Differentiable (the backward's GEMMs run in torch).

    Args:
        x: (..., K) bfloat16 or float16 activations on a CUDA device; any number of rows.
        w: (N, K) weight of x's dtype; N and K multiples of 8, 16-byte aligned.
        bias: optional (N,) contiguous vector, x's dtype or float32.
        out: optional contiguous (..., N) tensor of the output dtype to write into (not
            with autograd).
        out_dtype: bfloat16, float16 or float32; default ``out``'s dtype, else x's.
        epilogue: None, "relu", "gelu" (erf), "gelu_tanh" or "silu", applied to
            ``x @ w.T + bias`` in fp32 before the single rounding.

    Returns:
        (..., N) in ``out_dtype`` (``out`` itself when given).

    Raises:
        TypeError / ValueError: as :func:`gemm`, naming ``x``, ``w``, ``bias`` or ``out``
            (e.g. ``x must have dtype bfloat16 or float16``; ``x must be on a CUDA
            device``).
        UnsupportedGPUError: a GPU without a kernel path.
    """
    y = _launch_cached(x, w, bias, out, out_dtype, epilogue)
    if y is not None:
        return y
    check_tensor("x", x, dtypes=IN_DTYPES, min_ndim=1, on_cuda=False)
    check_tensor("w", w, dtypes=IN_DTYPES, ndim=2, on_cuda=False)
    flat = x.dim() == 2  # the common case needs no views (each costs µs of host time)
    lead = x.shape[:-1]
    x2 = x if flat else x.reshape(-1, x.shape[-1])
    out2 = None
    if out is not None:
        check_tensor("out", out, on_cuda=False)
        if out.shape[:-1] != lead or out.shape[-1] != w.shape[0]:
            raise ValueError(f"out must have shape {(*lead, w.shape[0])}, got {tuple(out.shape)}")
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")
        out2 = out if flat else out.view(-1, w.shape[0])
    y = _LINEAR(x2, w, bias, _out_dtype(out_dtype, out, x), epilogue, out=out2)
    return y if flat else y.view(*lead, w.shape[0])
