"""``topk_rows``: the k largest columns of every row, as increasing int32 lists, by the
radix-select kernel (kernels/topk.py; on long rows over the candidates above a sampled
threshold, tuning/topk.py). ``topk_indices`` (ops/column_sparse.py) calls it for
CUDA scores without random extra columns; this module is its kernel plumbing: build, launch,
the custom op for ``torch.compile``."""

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
from ..tuning.topk import topk_plan
from .dispatch import KernelOp

#: the score dtypes top-k takes (topk_indices checks them too)
SCORE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TOPK_KERNEL = "cute_kernels.kernels.topk:TopkRows"


vector_width = row_vector_width  # columns per thread load (runtime/validate.py)


def make_build(dtype: torch.dtype, vec: int, **config):
    """The kernel against symbolic (R, N) scores (unit column stride; with ``vec`` > 1 a row
    stride and N that are multiples of it, 16-byte aligned) and (R, L) int32 lists;
    ``config``: TopkRows options (candidates, threads, digit_bits, hist_copies, unroll;
    tuning/topk.py picks candidates and threads)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    from ..kernels.topk import TopkRows
    from ..runtime.bridge import cutlass_dtype, fake_rows, sym
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    kernel = TopkRows(key_bits=8 * torch.empty((), dtype=dtype).element_size(), vec=vec,
                      **config)
    scores = make_fake_tensor(cutlass_dtype(dtype), (sym(), sym(vec)), (sym(vec), 1),
                              assumed_align=VECTOR_BYTES if vec > 1 else None)
    return Build(kernel, launch_args(kernel, mScores=scores,
                                     mIndices=fake_rows(torch.int32, compact=False, align=4),
                                     k=cutlass.Int32(1), sample_rank=cutlass.Int32(0)))


def _topk_rows(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The direct route: (R, k) int32, each row's k largest columns in increasing order."""
    from ..runtime.launch import kernel_params

    check_cuda("scores", rows)
    out = torch.empty(rows.shape[0], k, dtype=torch.int32, device=rows.device)
    if rows.shape[0] == 0:
        return out
    if rows.stride(1) != 1:
        rows = rows.contiguous()
    vec = vector_width(rows)
    plan = topk_plan(rows.shape[1], k)
    config = {"candidates": plan.candidates, "threads": plan.threads}
    kernel = kernel_for(rows.device, ("topk_rows", rows.dtype, vec, plan.candidates,
                                      plan.threads),
                        lambda path, target: make_build(rows.dtype, vec, **config))
    kernel(*kernel_params(TOPK_KERNEL).call_args(mScores=rows, mIndices=out, k=k,
                                                 sample_rank=plan.sample_rank))
    return out


@torch.library.custom_op("cute_kernels::topk_rows", mutates_args=())
def _topk_rows_op(rows: torch.Tensor, k: int) -> torch.Tensor:
    return _topk_rows(rows, k)


@_topk_rows_op.register_fake
def _(rows, k):
    return rows.new_empty(rows.shape[0], k, dtype=torch.int32)


_TOPK_ROWS = KernelOp(_topk_rows_op, _topk_rows)


def topk_rows(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest columns of each row of ``rows`` (R, N) (float32, bfloat16 or float16, on
    a CUDA device), int32 (R, k), each list increasing. Exact: the top k by value, NaN
    largest; among equal values the lowest columns. ``topk_indices`` builds on it."""
    check_tensor("scores", rows, dtypes=SCORE_DTYPES, ndim=2, on_cuda=False)
    k = check_int("k", k, min_value=1)
    if k > rows.shape[1]:
        raise ValueError(f"k must be <= N = {rows.shape[1]} (the columns of scores), got {k}")
    return _TOPK_ROWS(rows, k)
