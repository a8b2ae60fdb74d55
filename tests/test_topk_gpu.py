"""The radix-select top-k kernel (kernels/topk.py) on the GPU: exact top sets against the
values torch.topk picks (tie-aware), the tie rule, NaN, increasing lists, poisoned outputs,
odd and aligned widths, strided rows, every score dtype, both kernel paths; and
topk_indices built on it."""

import os

import pytest
import torch
from gpu_paths import PATHS  # tests/ is on pytest's path

import cute_kernels as ck
from cute_kernels.ops.column_sparse import topk_indices
from cute_kernels.ops.topk import TOPK_KERNEL, make_build, topk_rows, vector_width

pytestmark = pytest.mark.gpu

POISON = -7
DTYPES = [torch.bfloat16, torch.float16, torch.float32]



def fresh(shape, dtype, heavy=False):
    g = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    x = torch.randn(shape, generator=g, device="cuda")
    if heavy:  # heavy-tailed (log-normal-ish column sums)
        x = torch.exp(2 * x)
    return x.to(dtype)


def check_top(rows: torch.Tensor, got: torch.Tensor, k: int) -> None:
    """``got`` (R, k): increasing, in range, and the selected values are the k largest (as a
    multiset, NaN largest), with ties at the k-th value taken from the lowest columns."""
    r, n = rows.shape
    assert got.shape == (r, k) and got.dtype == torch.int32
    g = got.long()
    assert int(g.min()) >= 0 and int(g.max()) < n
    if k > 1:
        assert bool((g[:, 1:] > g[:, :-1]).all()), "lists must be strictly increasing"
    x = rows.float().nan_to_num(nan=float("inf"))  # NaN ranks first, as in torch.topk
    want = x.topk(k, dim=1).values.sort(dim=1).values
    have = x.gather(1, g).sort(dim=1).values
    assert torch.equal(have, want), "selected values differ from the k largest"
    kth = want[:, :1]
    above = (x > kth).sum(1)
    for i in range(min(r, 64)):  # the tie rule: the first e columns equal to the k-th value
        e = k - int(above[i])
        equal_cols = (x[i] == kth[i]).nonzero().flatten()[:e]
        chosen_equal = g[i][x[i, g[i]] == kth[i]]
        assert torch.equal(chosen_equal.sort().values, equal_cols.sort().values), i


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("r, n, k", [(1, 1, 1), (3, 1000, 7), (5, 4099, 300), (64, 16384, 1147),
                                     (7, 118784, 8315), (2, 777, 777), (33, 4096, 1)])
def test_topk_rows_matches_torch(path, dtype, r, n, k):
    rows = fresh((r, n), dtype)
    with ck.force_path(path):
        check_top(rows, topk_rows(rows, k), k)


@pytest.mark.parametrize("n", [5000, 20000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_nan_and_heavy_tails(dtype, n):
    """n = 20000 takes the sampled candidates (k = 150 .. 350), with the fallback for the
    constant row; k = 4999 is the radix select."""
    rows = fresh((16, n), dtype, heavy=True)
    rows[:, 100:400] = rows[:, 100:101]  # long runs of one value: the tie rule decides
    rows[3, 17] = float("nan")
    rows[3, 4000] = float("nan")
    rows[5] = 1.0  # a constant row: the first k columns
    for k in (1, 150, 350, 4999):
        got = topk_rows(rows, k)
        check_top(rows, got, k)
        assert {17, 4000} <= set(got[3].tolist()) or k < 2
        assert got[5].tolist() == list(range(k))


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_and_misaligned_rows(dtype):
    base = fresh((40, 3001), dtype)
    for rows in (base[::3, 1:2601],  # row stride 3 x 3001, misaligned start: 1 column a load
                 base[:, :2048],     # aligned start, row stride not a multiple of 8
                 fresh((2048, 30), dtype).t()):  # column stride != 1: copied first
        check_top(rows, topk_rows(rows, 100), 100)


@pytest.mark.parametrize("path", PATHS)
def test_kernel_writes_exactly_k_entries(path):
    """Straight through the compiled kernel into a poisoned, wider list: the first k entries
    of every row are written, the rest untouched (both load widths)."""
    from cute_kernels.runtime.bridge import kernel_for
    from cute_kernels.runtime.launch import kernel_params

    for n, dtype in ((16384, torch.bfloat16), (999, torch.float32)):
        rows = fresh((9, n), dtype)
        vec = vector_width(rows)
        out = torch.full((9, 400), POISON, dtype=torch.int32, device="cuda")
        with ck.force_path(path):
            kernel = kernel_for(rows.device, ("test-topk", dtype, vec),
                                lambda p, t, dtype=dtype, vec=vec: make_build(dtype, vec))
            kernel(*kernel_params(TOPK_KERNEL).call_args(mScores=rows, mIndices=out, k=300,
                                                         sample_rank=0))
        torch.cuda.synchronize()
        check_top(rows, out[:, :300].contiguous(), 300)
        assert bool((out[:, 300:] == POISON).all())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype, buffer", [(torch.float32, 4096), (torch.bfloat16, 16384),
                                           (torch.float16, 4096)])
def test_sampled_candidates_and_their_fallback(path, dtype, buffer):
    """The sampled-candidates kernel (kernels/topk.py steps 4-6) straight through, into a
    poisoned list, at every kind of threshold: the planned sample rank (the candidates
    hold the top k), rank 1 (the largest sample: too few candidates, the exact fallback),
    the last rank (the smallest sample: more candidates than the buffer holds, the fallback
    again) and 0 (no sample): the same exact lists each time. Row 2 is constant (every key
    ties), row 3 has a run of ties across the k-th value, rows 4 and 5 are heavy-tailed and
    a smooth random walk, row 6 has NaNs."""
    from cute_kernels.runtime.bridge import kernel_for
    from cute_kernels.runtime.launch import kernel_params
    from cute_kernels.tuning.topk import SAMPLES, topk_plan

    n = 24_000 if buffer == 4096 else 100_000
    k = round(0.065 * n)
    rows = fresh((9, n), dtype)
    rows[2] = 0.5
    kth = rows[3].float().topk(k).values[-1]
    rows[3, 5000:5600] = kth.to(dtype)
    rows[4] = fresh((n,), dtype, heavy=True)
    rows[5] = fresh((n,), torch.float32).cumsum(0).to(dtype)
    rows[6, ::997] = float("nan")
    plan = topk_plan(n, k)
    assert plan.candidates == buffer and 1 < plan.sample_rank < SAMPLES
    vec = vector_width(rows)
    with ck.force_path(path):
        kernel = kernel_for(rows.device, ("test-topk-sampled", dtype, vec, buffer),
                            lambda p, t: make_build(dtype, vec, candidates=buffer))
    for rank in (plan.sample_rank, 1, SAMPLES, 0):
        out = torch.full((9, k + 5), POISON, dtype=torch.int32, device="cuda")
        kernel(*kernel_params(TOPK_KERNEL).call_args(mScores=rows, mIndices=out, k=k,
                                                     sample_rank=rank))
        torch.cuda.synchronize()
        check_top(rows, out[:, :k].contiguous(), k)
        assert bool((out[:, k:] == POISON).all()), rank
        assert out[2].tolist()[:k] == list(range(k))


@pytest.mark.parametrize("n", [1000, 30000])
@pytest.mark.parametrize("share", [0.07, 0.2])
@pytest.mark.parametrize("heavy", [False, True])
def test_topk_indices_recall(share, heavy, n):
    """n = 1000: the radix select; n = 30000: the sampled candidates."""
    scores = fresh((4, 6, n), torch.float32, heavy=heavy)
    k = round(share * n)
    indices, counts = topk_indices(scores, k)
    assert indices.shape == (4, 6, k) and bool((counts == k).all())
    want = scores.topk(k, dim=-1).indices.sort(dim=-1).values
    chosen = torch.zeros(24, n, device="cuda").scatter_(1, want.view(-1, k), 1.0)
    recall = chosen.gather(1, indices.view(-1, k).long()).mean(1)  # per row
    # exact (continuous scores have no ties): recall 1.0 in every row
    assert bool((recall == 1.0).all()), recall.min()
    padded, _ = topk_indices(scores, k, multiple_of=128)
    assert padded.shape[-1] == -(-k // 128) * 128
    assert bool(torch.isin(want[0, 0], padded[0, 0].long()).all())


def test_topk_indices_under_torch_compile():
    scores = fresh((2, 3, 700), torch.bfloat16)
    eager = topk_indices(scores, 50)
    compiled = torch.compile(lambda s: topk_indices(s, 50), fullgraph=True)(scores)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


def test_topk_indices_with_random_columns():
    """random_fraction: the kernel's exact top set plus distinct random others, in order."""
    scores = fresh((3, 5, 2000), torch.float32)
    k = 140
    g = torch.Generator(device="cuda").manual_seed(3)
    indices, counts = topk_indices(scores, k, random_fraction=0.5, generator=g)
    total = k + 70
    assert indices.shape == (3, 5, total) and bool((counts == total).all())
    rows = indices.view(-1, total).long()
    assert bool((rows[:, 1:] > rows[:, :-1]).all())  # increasing, hence distinct
    top = scores.view(-1, 2000).topk(k, dim=1).indices
    assert bool(torch.isin(top[0], rows[0]).all()) and bool(torch.isin(top[-1], rows[-1]).all())
