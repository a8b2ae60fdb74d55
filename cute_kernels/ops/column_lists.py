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
from ..runtime.launch import kernel_params
from ..runtime.validate import check_cuda, check_int, check_tensor

COLUMN_LISTS_KERNEL = "cute_kernels.kernels.column_lists:ColumnLists"
COLUMN_COUNTS_KERNEL = "cute_kernels.kernels.column_lists:ColumnCounts"
WORD_BYTES = 4


def word_loads(packed: torch.Tensor) -> bool:
    """Whether the (R, bytes) rows load as 32-bit words: base and row stride 4-byte aligned
    and a multiple of 4 bytes per row (else the kernels assemble words from byte loads)."""
    return (packed.data_ptr() % WORD_BYTES == 0 and packed.shape[1] % WORD_BYTES == 0
            and (packed.shape[0] == 1 or packed.stride(0) % WORD_BYTES == 0))


def make_build(kind: str, words: bool, **config):
    """``kind`` "lists" (ColumnLists) or "counts" (ColumnCounts) against symbolic (R, bytes)
    uint8 rows (4-byte aligned, a multiple of 4 bytes, when ``words``); ``config``: the walk's
    warps and prefetch (tuning)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    from ..kernels.column_lists import ColumnCounts, ColumnLists
    from ..runtime.bridge import fake_rows, fake_vector, sym
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    align = WORD_BYTES if words else 1
    packed = make_fake_tensor(cutlass.Uint8, (sym(), sym(align)), (sym(align), 1),
                              assumed_align=align if words else None)
    vector = fake_vector(torch.int32, align=4)
    if kind == "counts":
        kernel = ColumnCounts(words, **config)
        return Build(kernel, launch_args(kernel, mPacked=packed, mCounts=vector,
                                         mPadded=fake_vector(torch.int32, align=4),
                                         mMax=fake_vector(torch.int32, align=4),
                                         n=cutlass.Int32(1), multiple_of=cutlass.Int32(1)))
    kernel = ColumnLists(words, **config)
    return Build(kernel, launch_args(
        kernel, mPacked=packed, mCounts=vector,
        mIndices=fake_rows(torch.int32, compact=True, align=4), n=cutlass.Int32(1)))


def _check_packed(packed: torch.Tensor, n) -> int:
    check_tensor("packed", packed, dtypes=(torch.uint8,), ndim=2, on_cuda=False)
    n = check_int("n", n, min_value=1)
    if packed.shape[1] != -(-n // 8):
        raise ValueError(f"packed must be (R, ceil(n / 8) = {-(-n // 8)}) bytes, got "
                         f"{tuple(packed.shape)}")
    return n


def _kernel(kind: str, packed: torch.Tensor):
    """The compiled kernel for these rows, and the rows as the kernel reads them (a unit
    column stride)."""
    if packed.stride(1) != 1:
        packed = packed.contiguous()
    words = word_loads(packed)
    kernel = kernel_for(packed.device, ("column_" + kind, words),
                        lambda path, target: make_build(kind, words))
    return kernel, packed


def column_counts(packed: torch.Tensor, n: int, multiple_of: int = 1
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of ``packed`` (R, ceil(n / 8)) uint8 (bits past ``n`` ignored): int32 (R,) set
    bits, int32 (R,) of them padded to ``multiple_of`` (capped at ``n``), and an int32 (1,)
    tensor holding the largest padded count (0 without rows). One kernel, no sync."""
    n = _check_packed(packed, n)
    multiple_of = check_int("multiple_of", multiple_of, min_value=1)
    check_cuda("packed", packed)
    return counts_unchecked(packed, n, multiple_of)


def counts_unchecked(packed: torch.Tensor, n: int, multiple_of: int):
    """:func:`column_counts` for arguments already checked (``column_indices``)."""
    r = packed.shape[0]
    counts = torch.empty(r, dtype=torch.int32, device=packed.device)
    padded = torch.empty(r, dtype=torch.int32, device=packed.device)
    largest = torch.zeros(1, dtype=torch.int32, device=packed.device)
    if r:
        kernel, packed = _kernel("counts", packed)
        kernel(*kernel_params(COLUMN_COUNTS_KERNEL).call_args(
            mPacked=packed, mCounts=counts, mPadded=padded, mMax=largest, n=n,
            multiple_of=multiple_of))
    return counts, padded, largest


def column_lists(packed: torch.Tensor, counts: torch.Tensor, n: int, width: int) -> torch.Tensor:
    """int32 (R, width): per row of ``packed`` (R, ceil(n / 8)) uint8, its selected columns
    in increasing order, then its unselected ones, the first ``width`` (<= n); ``counts``
    (R,) int32 must be the rows' selected counts (the kernel trusts them:
    :func:`column_counts` writes them)."""
    n = _check_packed(packed, n)
    check_tensor("counts", counts, dtypes=(torch.int32,), ndim=1, on_cuda=False)
    width = check_int("width", width, min_value=1)
    if counts.shape[0] != packed.shape[0] or width > n:
        raise ValueError(f"counts must be (R,) = ({packed.shape[0]},) and width <= n = {n}; "
                         f"got {tuple(counts.shape)}, {width}")
    check_cuda("packed", packed)
    return lists_unchecked(packed, counts, n, width)


def lists_unchecked(packed: torch.Tensor, counts: torch.Tensor, n: int, width: int):
    """:func:`column_lists` for arguments already checked (``column_indices``)."""
    out = torch.empty(packed.shape[0], width, dtype=torch.int32, device=packed.device)
    if packed.shape[0] == 0:
        return out
    kernel, packed = _kernel("lists", packed)
    kernel(*kernel_params(COLUMN_LISTS_KERNEL).call_args(
        mPacked=packed, mCounts=counts.contiguous(), mIndices=out, n=n))
    return out
