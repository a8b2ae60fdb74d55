"""The torch side of a kernel call: dtype mapping, symbolic fake tensors for compiling, and the
device lookup that picks path, compile target and cached kernel.

Kernels are compiled once per (op, variant, target, dtypes, flags) against *fake* tensors whose
sizes and strides are symbolic, then called with real torch tensors through TVM-FFI.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .arch import device_target, forced_path
from .compile import KERNELS, Build


def cutlass_dtype(dtype: torch.dtype):
    import cutlass

    table = {
        torch.bool: cutlass.Uint8,  # bool tensors travel as their bytes (t.view(torch.uint8))
        torch.uint8: cutlass.Uint8,
        torch.int8: cutlass.Int8,
        torch.int32: cutlass.Int32,
        torch.int64: cutlass.Int64,
        torch.float16: cutlass.Float16,
        torch.bfloat16: cutlass.BFloat16,
        torch.float32: cutlass.Float32,
    }
    if dtype not in table:
        raise TypeError(f"no CuTe DSL type for {dtype}")
    return table[dtype]


def sym(divisibility: int = 1):
    """A symbolic 64-bit size/stride for a fake tensor."""
    import cutlass.cute as cute

    return cute.sym_int64(divisibility=divisibility)


def fake_vector(dtype: torch.dtype, *, align: int = 16, divisibility: int = 1):
    """A 1-D contiguous tensor of symbolic length."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(cutlass_dtype(dtype), (sym(divisibility),),
                                    assumed_align=align)


def fake_rows(dtype: torch.dtype, *, compact: bool, align: int | None = None):
    """A 2-D (rows, cols) tensor with unit column stride; the row stride is symbolic unless
    ``compact`` (then it equals cols)."""
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

    dt = cutlass_dtype(dtype)
    if compact:
        return make_fake_compact_tensor(dt, (sym(), sym()), stride_order=(1, 0),
                                        assumed_align=align)
    return make_fake_tensor(dt, (sym(), sym()), (sym(), 1), assumed_align=align)


def fake_mkl(dtype: torch.dtype, major: str, batched: bool = True):
    """A GEMM operand in canonical (rows, K, batch) form, 16-byte aligned, with the unit stride
    on K (``major == "k"``) or on the rows (``"m"``/``"n"``); other strides symbolic and
    multiples of 8 elements (TMA's 16-byte stride rule for 16-bit types). ``batched=False``:
    a plain (rows, K) tensor (the kernels add the batch mode of one themselves)."""
    from cutlass.cute.runtime import make_fake_tensor

    shape = (sym(), sym(8), sym())
    stride = (sym(8), 1, sym(8)) if major == "k" else (1, sym(8), sym(8))
    if not batched:
        shape, stride = shape[:2], stride[:2]
    return make_fake_tensor(cutlass_dtype(dtype), shape, stride, assumed_align=16)


def fake_bhsd(dtype: torch.dtype, head_dim: int):
    """An attention operand (B, H, S, D): symbolic sizes, a unit-stride head dim of
    ``head_dim``, other strides symbolic multiples of 8 elements, 16-byte aligned."""
    from cutlass.cute.runtime import make_fake_tensor

    return make_fake_tensor(cutlass_dtype(dtype), (sym(), sym(), sym(), head_dim),
                            (sym(8), sym(8), sym(8), 1), assumed_align=16)


def fake_compact(dtype: torch.dtype, rank: int):
    """A compact row-major tensor of ``rank`` symbolic sizes, 4-byte aligned (lse, column
    sums, index lists and counts)."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(cutlass_dtype(dtype), tuple(sym() for _ in range(rank)),
                                    stride_order=tuple(range(rank - 1, -1, -1)),
                                    assumed_align=4)


def env_stream():
    """The stream argument: left out of the call, TVM-FFI passes torch's current stream."""
    from cutlass.cute.runtime import make_fake_stream

    return make_fake_stream(use_tvm_ffi_env_stream=True)


_RESOLVED: dict[tuple, Callable] = {}


def kernel_for(device: torch.device, key: tuple, make_build: Callable[[str, str], Build],
               hopper_key: tuple = ()):
    """The compiled kernel for ``key`` on ``device``.

    ``hopper_key`` holds configuration only the Hopper kernel compiles in (tile, cluster): it
    joins the cache key on the Hopper path only, so the Ampere path does not compile the same
    kernel once per Hopper schedule.

    ``make_build(path, target)`` is only called on a cache miss. The cache key gets the path
    and the compile target appended, so a forced Ampere path on Hopper is a separate entry.
    The hot path is one dict lookup keyed on (key, device index, forced path): resolving the
    device's architecture costs more than launching a small kernel.
    """
    forced = forced_path()
    fast_key = (key, hopper_key, device.index, forced)
    fn = _RESOLVED.get(fast_key)
    if fn is None:
        path, target = device_target(device)
        full_key = (*key, *(hopper_key if path == "hopper" else ()), path, target)
        fn = KERNELS.get(full_key, lambda: make_build(path, target), target)
        _RESOLVED[fast_key] = fn
    return fn
