"""The column-lists kernel (kernels/column_lists.py) as a torch call: index lists from a
bitpacked column mask and its selected counts. ``column_indices`` (ops/column_sparse.py) is
its user: on CUDA tensors it computes the counts and L, packs a bool mask with ``pack_mask``,
and calls :func:`column_lists` (CPU tensors keep the torch compaction). GPU tests:
tests/test_column_lists_gpu.py (the kernel and ``column_indices`` on CUDA against
``column_indices_reference``; passed on an H100). Not a custom op: ``column_indices`` sizes
its output from the counts (a device sync), so it has no fake implementation either."""

from __future__ import annotations

import torch

from ..runtime.bridge import kernel_for
from ..runtime.validate import (
    VECTOR_BYTES,
    check_cuda,
    check_int,
    check_tensor,
    row_vector_width,
)

COLUMN_LISTS_KERNEL = "cute_kernels.kernels.column_lists:ColumnLists"


byte_width = row_vector_width  # bytes per thread load (runtime/validate.py)


def make_build(vec: int):
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    from ..kernels.column_lists import ColumnLists
    from ..runtime.bridge import fake_rows, fake_vector, sym
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    kernel = ColumnLists(vec)
    packed = make_fake_tensor(cutlass.Uint8, (sym(), sym(vec)), (sym(vec), 1),
                              assumed_align=VECTOR_BYTES if vec > 1 else None)
    return Build(kernel, launch_args(
        kernel, mPacked=packed, mCounts=fake_vector(torch.int32, align=4),
        mIndices=fake_rows(torch.int32, compact=True, align=4), n=cutlass.Int32(1)))


def column_lists(packed: torch.Tensor, counts: torch.Tensor, n: int, width: int) -> torch.Tensor:
    """int32 (R, width): per row of ``packed`` (R, ceil(n / 8)) uint8, its selected columns
    in increasing order, then its unselected ones, the first ``width`` (<= n); ``counts``
    (R,) int32 must be the rows' selected counts (the kernel trusts them)."""
    check_tensor("packed", packed, dtypes=(torch.uint8,), ndim=2, on_cuda=False)
    check_tensor("counts", counts, dtypes=(torch.int32,), ndim=1, on_cuda=False)
    n = check_int("n", n, min_value=1)
    width = check_int("width", width, min_value=1)
    if packed.shape[1] != -(-n // 8) or counts.shape[0] != packed.shape[0] or width > n:
        raise ValueError(f"packed must be (R, ceil(n / 8) = {-(-n // 8)}), counts (R,) and "
                         f"width <= n = {n}; got {tuple(packed.shape)}, "
                         f"{tuple(counts.shape)}, {width}")
    check_cuda("packed", packed)
    from ..runtime.launch import kernel_params

    out = torch.empty(packed.shape[0], width, dtype=torch.int32, device=packed.device)
    if packed.shape[0] == 0:
        return out
    if packed.stride(1) != 1:
        packed = packed.contiguous()
    vec = byte_width(packed)
    kernel = kernel_for(packed.device, ("column_lists", vec), lambda path, target: make_build(vec))
    kernel(*kernel_params(COLUMN_LISTS_KERNEL).call_args(
        mPacked=packed, mCounts=counts.contiguous(), mIndices=out, n=n))
    return out
