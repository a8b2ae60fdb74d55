"""``column_sparse_attention`` end to end on the GPU (validation, routing, both paths' gather
kernels) against the float32 reference (``cute_kernels.reference.column_sparse_attention``):
query group g of head h attends to ``indices[b, h, g, :counts[b, h, g]]``.

The error bar is torch's own: bf16 SDPA over the same keys (the reference's dense form, the
listed keys' multiplicity folded into the logits as log(count)), measured against the same
float32 reference, times two."""

import math
import os

import pytest
import torch
from gpu_paths import HOPPER, PATHS  # tests/ is on pytest's path

from cute_kernels import force_path, reference
from cute_kernels.ops.column_sparse import column_sparse_attention

pytestmark = pytest.mark.gpu


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def make_inputs(b, h, h_kv, s_q, s_kv, d, group, counts_of, length=None, dtype=torch.bfloat16):
    """Strided q ((B, S, H, D) storage), k and v; per group a random, unsorted list of key
    rows with duplicates, padded past its count with out-of-range garbage (never read)."""
    q = torch.randn(b, s_q, h, d, device="cuda").to(dtype).transpose(1, 2)
    k = torch.randn(b, h_kv, s_kv, d, device="cuda").to(dtype)
    v = torch.randn(b, h_kv, s_kv, d, device="cuda").to(dtype)
    groups = -(-s_q // group)
    counts = torch.tensor(counts_of(b * h * groups), dtype=torch.int32,
                          device="cuda").view(b, h, groups)
    length = length or max(1, int(counts.max()))
    indices = torch.randint(0, s_kv, (b, h, groups, length), dtype=torch.int32, device="cuda")
    past = torch.arange(length, device="cuda") >= counts[..., None]
    indices = indices.masked_fill(past, s_kv + 12345)  # garbage past the count
    return q, k, v, indices, counts


def torch_bf16_error(q, k, v, indices, counts, group, ref_o):
    """torch's bf16 SDPA over the same key multiset, against the float32 reference."""
    b, h, s_q, d = q.shape
    s_kv = k.shape[2]
    length = indices.shape[-1]
    listed = torch.arange(length, device="cuda") < counts[..., None]
    mult = torch.zeros(b, h, indices.shape[2], s_kv, device="cuda")
    mult.scatter_add_(3, indices.long().clamp(0, s_kv - 1), listed.float())
    bias = mult.log().repeat_interleave(group, dim=2)[:, :, :s_q].to(q.dtype)
    rep = h // k.shape[1]
    o = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=bias)
    empty = (counts == 0).repeat_interleave(group, dim=2)[:, :, :s_q]
    return rel_err(o.nan_to_num(0.0).masked_fill(empty[..., None], 0.0), ref_o)


def check(o, lse, q, k, v, indices, counts, group):
    ref_o, ref_lse = reference.column_sparse_attention(q, k, v, indices, counts, group=group,
                                                       return_lse=True)
    assert not torch.isnan(o).any()
    visible = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), visible)
    torch.testing.assert_close(lse[visible], ref_lse[visible], rtol=0, atol=1e-3)
    assert rel_err(o, ref_o) <= 2 * torch_bf16_error(q, k, v, indices, counts, group, ref_o) \
        + 1e-6


COUNTS = [0, 1, 17, 191, 192, 1000]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [64, 128, 192])
@pytest.mark.parametrize("s_q, s_kv, h, h_kv", [(1000, 1500, 2, 1), (192, 2049, 2, 2),
                                                (333, 77, 4, 2)])
def test_matches_reference(path, d, group, s_q, s_kv, h, h_kv):
    """Counts 0, 1, 17, 191, 192, 1000 and S_kv cycled over the groups (B = 2), GQA, S_q not
    a multiple of the group, strided q, poisoned output."""
    choices = [c for c in COUNTS if c <= s_kv] + [s_kv]
    q, k, v, indices, counts = make_inputs(
        2, h, h_kv, s_q, s_kv, d, group, lambda n: [choices[i % len(choices)] for i in range(n)])
    poisoned = torch.full_like(q, float("nan"))
    with force_path(path):
        o, lse = column_sparse_attention(q, k, v, indices, counts, group=group, out=poisoned,
                                         return_lse=True)
    assert o is poisoned
    check(o, lse, q, k, v, indices, counts, group)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("group", [64, 192])
def test_uneven_counts_run_longest_first(path, group):
    """More tiles than one wave of CTAs: the op runs the grid longest list first
    (``tile_order``; on Ampere three 64-row tiles share a 192-row group's list). Counts
    uniform in [0, S_kv], strided q, GQA, B = 2, poisoned output: every tile still lands
    where it belongs."""
    from cute_kernels.ops.column_sparse import _gather_tiling

    b, h, s_q, s_kv = 2, 8, 10 * group + 5, 2000
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    q, k, v, indices, counts = make_inputs(
        b, h, 4, s_q, s_kv, 128, group,
        lambda n: torch.randint(0, s_kv + 1, (n,), generator=gen).tolist())
    poisoned = torch.full_like(q, float("nan"))
    with force_path(path):
        block_m, wave, _ = _gather_tiling(q.device, group, 128, indices.shape[-1])
        assert b * h * -(-s_q // block_m) > wave  # the ordered grid
        o, lse = column_sparse_attention(q, k, v, indices, counts, group=group, out=poisoned,
                                         return_lse=True)
    check(o, lse, q, k, v, indices, counts, group)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the Hopper tiles' choice)")
@pytest.mark.parametrize("width, short, persistent", [(1024, True, True), (1024, True, False),
                                                      (1025, False, True)])
def test_short_lists_run_two_ctas_per_sm(monkeypatch, width, short, persistent):
    """Lists of at most SHORT_GATHER_MAX_KEYS keys (the width here) take the 64 x 64 gather
    tiles two CTAs run per SM, a longer width the 128 x 128 ones (asserted); either way
    uneven counts in [0, width] over more tiles than a wave (the longest-first order over
    64-row tiles reading 128-row groups' lists: the short tiles' persistent CTAs walk it,
    or with SHORT_GATHER_PERSISTENT off the ordered grid runs it), GQA, strided q, poisoned
    output."""
    from cute_kernels.ops import column_sparse as cs
    from cute_kernels.ops.column_sparse import _gather_tiling

    monkeypatch.setattr(cs, "SHORT_GATHER_PERSISTENT", persistent)

    b, h, s_q, s_kv = 2, 16, 4000, 3000
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    q, k, v, indices, counts = make_inputs(
        b, h, 4, s_q, s_kv, 128, 128,
        lambda n: torch.randint(0, width + 1, (n,), generator=gen).tolist(), length=width)
    block_m, wave, chosen = _gather_tiling(q.device, 128, 128, indices.shape[-1])
    assert chosen == short and block_m == (64 if short else 128)
    assert b * h * -(-s_q // block_m) > wave
    poisoned = torch.full_like(q, float("nan"))
    o, lse = column_sparse_attention(q, k, v, indices, counts, group=128, out=poisoned,
                                     return_lse=True)
    assert o is poisoned
    check(o, lse, q, k, v, indices, counts, 128)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the persistent short-list route)")
def test_persistent_short_lists_capture_a_fresh_grid():
    """The short lists' persistent walks inside a CUDA graph on a grid never seen eagerly (a
    warm-up on another S_q compiles the kernel): the deal is built and captured, not cached
    from the capture (its tensors would live in the graph's pool); replays on new inputs and
    an eager call after it match the reference."""
    from cute_kernels.ops.column_sparse import _gather_tiling

    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))

    def inputs(s_q):
        return make_inputs(2, 16, 4, s_q, 2000, 128, 128,
                           lambda n: torch.randint(0, 513, (n,), generator=gen).tolist(),
                           length=512)

    def run(q, k, v, indices, counts):
        return column_sparse_attention(q, k, v, indices, counts, group=128, return_lse=True)

    warm = inputs(4000)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(*warm)
    torch.cuda.current_stream().wait_stream(side)
    captured = inputs(4100)
    block_m, wave, short = _gather_tiling(captured[0].device, 128, 128, 512)
    assert short and 2 * 16 * -(-4100 // block_m) > wave  # the persistent route
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = run(*captured)
    for _ in range(2):
        fresh = inputs(4100)
        for dst, src in zip(captured, fresh):
            dst.copy_(src)
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(o, lse, *fresh, 128)
    eager = inputs(4100)
    check(*run(*eager), *eager, 128)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [128, 192])
def test_all_columns_equals_dense(path, d, group):
    """Every key listed once, in order: the dense attention."""
    import cute_kernels as ck

    s = 1000
    q, k, v, _, _ = make_inputs(1, 2, 2, s, s, d, group, lambda n: [0] * n)
    groups = -(-s // group)
    indices = torch.arange(s, dtype=torch.int32, device="cuda").expand(1, 2, groups, s)
    counts = torch.full((1, 2, groups), s, dtype=torch.int32, device="cuda")
    with force_path(path):
        o = column_sparse_attention(q, k, v, indices.contiguous(), counts, group=group)
        dense = ck.attention(q, k, v)
    assert rel_err(o, dense.float()) < 1e-2


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("out_scale", [1.0, -1.0, 0.5])
def test_accumulate(path, out_scale):
    """accumulate=True adds out_scale * attention onto out in the kernel's epilogue (both
    signs); out_scale also scales the written result without accumulate."""
    group, d = 192, 128
    q, k, v, indices, counts = make_inputs(2, 2, 2, 700, 900, d, group,
                                           lambda n: [(37 * i) % 900 for i in range(n)])
    base = torch.randn_like(q)
    out = base.clone()
    with force_path(path):
        got = column_sparse_attention(q, k, v, indices, counts, group=group, out=out,
                                      accumulate=True, out_scale=out_scale)
        written = column_sparse_attention(q, k, v, indices, counts, group=group,
                                          out_scale=out_scale)
    assert got is out
    ref_o = reference.column_sparse_attention(q, k, v, indices, counts, group=group)
    expected = base.float() + out_scale * ref_o
    assert rel_err(got, expected) < 2e-2
    assert rel_err(written, out_scale * ref_o) < 2e-2


@pytest.mark.parametrize("path", PATHS)
def test_out_of_range_indices(path):
    """Bad indices never read out of bounds (the kernels clamp them); validate=True names
    them before launching."""
    q, k, v, indices, counts = make_inputs(1, 2, 2, 256, 300, 64, 128, lambda n: [50] * n)
    indices[..., 3] = 10**6
    with pytest.raises(ValueError, match="indices"):
        column_sparse_attention(q, k, v, indices, counts, group=128, validate=True)
    with force_path(path):
        o = column_sparse_attention(q, k, v, indices, counts, group=128, validate=False)
    torch.cuda.synchronize()
    assert not torch.isnan(o).any()


@pytest.mark.parametrize("path", PATHS)
def test_counts_past_the_list_are_clamped(path):
    """A count above the list's width L (or below 0) without validate: both kernels clamp it
    into [0, L], so the list is never read past its end; the result is attention over the
    whole list (or nothing); validate=True names the count."""
    q, k, v, indices, counts = make_inputs(1, 2, 2, 256, 300, 64, 128, lambda n: [50] * n)
    width = indices.shape[-1]
    bad = counts.clone()
    bad[..., 0] = width + 1000
    bad[..., 1] = -7
    with pytest.raises(ValueError, match="count"):
        column_sparse_attention(q, k, v, indices, bad, group=128, validate=True)
    with force_path(path):
        o = column_sparse_attention(q, k, v, indices, bad, group=128, validate=False)
        want = column_sparse_attention(q, k, v, indices, bad.clamp(0, width), group=128)
    torch.cuda.synchronize()
    torch.testing.assert_close(o, want, atol=0, rtol=0)


def test_large_sparse_shape_runs_on_hopper():
    """The Hopper gather kernel at a big, sparse video-like shape (93% of 16k keys dropped),
    D = 128, group 192: finite output matching the reference on a sample of groups."""
    if not HOPPER:
        pytest.skip("needs a Hopper (sm_90) GPU")
    s = 16384
    keep = math.ceil(0.07 * s)
    q, k, v, indices, counts = make_inputs(1, 2, 2, s, s, 128, 192, lambda n: [keep] * n)
    o = column_sparse_attention(q, k, v, indices, counts)
    ref_o = reference.column_sparse_attention(q[:, :, :1920], k, v, indices[:, :, :10],
                                              counts[:, :, :10], group=192)
    assert rel_err(o[:, :, :1920], ref_o) < 2e-2
