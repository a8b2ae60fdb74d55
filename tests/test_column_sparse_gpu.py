"""The Ampere column-sparse attention kernel (``AttentionSm80(..., gather=True)``) on the GPU
against a float32 reference: query group g of head h attends to the key rows
``indices[b, h, g, :counts[b, h, g]]`` (any order, duplicates counted twice).

The kernel is built and called directly (the op that validates and routes it is separate);
on a Hopper GPU it is compiled for sm_90a, as the Ampere path forced on Hopper is."""

import functools
import math

import pytest
import torch

from cute_kernels.ops.attention import attention_reference

pytestmark = pytest.mark.gpu


@functools.cache
def compiled(head_dim: int, config: tuple):
    from test_column_sparse_ptx import gather_build  # tests/ is on pytest's path

    from cute_kernels.runtime.arch import device_target
    from cute_kernels.runtime.compile import compile_build

    _, target = device_target(torch.device("cuda"))
    return compile_build(gather_build(head_dim, **dict(config)), target)


def run(q, k, v, indices, counts, group, scale=None, **config):
    """(o, lse) of the kernel, into NaN-poisoned outputs."""
    from cute_kernels.kernels.attention.sm80 import AttentionSm80
    from cute_kernels.runtime.launch import kernel_params

    d = q.shape[-1]
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=q.device)
    fn = compiled(d, tuple(sorted(dict(config, group=group).items())))
    fn(*kernel_params(AttentionSm80).call_args(
        mQ=q, mK=k, mV=v, mO=o, mLSE=lse, mPrevLSE=None, mColsum=None, mIndices=indices,
        mCounts=counts, scale=1.0 / math.sqrt(d) if scale is None else scale, out_scale=None))
    return o, lse


def reference(q, k, v, indices, counts, group, scale=None):
    """fp32 (o, lse): each query row's softmax over its group's listed keys, written as a
    dense softmax whose logits carry log(multiplicity) (a listed key counts once per listing,
    an unlisted one is -inf). Indices are clamped into [0, S_kv) as the kernel does."""
    b, h, s_q, d = q.shape
    s_kv = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    groups, length = indices.shape[2], indices.shape[3]
    listed = torch.arange(length, device=q.device) < counts.clamp(0, length)[..., None]
    mult = torch.zeros(b, h, groups, s_kv, device=q.device)
    mult.scatter_add_(3, indices.long().clamp(0, s_kv - 1), listed.float())
    mult = mult.repeat_interleave(group, dim=2)[:, :, :s_q]  # (B, H, S_q, S_kv)
    rep = h // k.shape[1]
    kf, vf = (t.repeat_interleave(rep, dim=1).float() for t in (k, v))
    s = q.float() @ kf.transpose(-1, -2) * scale + mult.log()
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # rows with no key: p = 0, lse = -inf
    return p @ vf, lse


def qkv(b, h, h_kv, s_q, s_kv, d, strided=True):
    """bf16 q, k, v; ``strided``: (B, S, H, D) storage seen as (B, H, S, D)."""
    def bhsd(heads, s):
        if strided:
            return torch.randn(b, s, heads, d, device="cuda").bfloat16().transpose(1, 2)
        return torch.randn(b, heads, s, d, device="cuda").bfloat16()

    return bhsd(h, s_q), bhsd(h_kv, s_kv), bhsd(h_kv, s_kv)


def make_indices(b, h, s_q, s_kv, group, counts, length=None, duplicates=False, pad=-12345):
    """int32 (indices (B, H, G, L), counts (B, H, G)): ``counts`` an int (every group) or a
    (B, H, G) tensor; rows drawn unsorted, without replacement unless ``duplicates``; list
    entries past a group's count set to ``pad`` (never read as rows)."""
    groups = -(-s_q // group)
    if isinstance(counts, int):
        counts = torch.full((b, h, groups), counts, dtype=torch.int32)
    counts = counts.to(torch.int32)
    length = length or max(int(counts.max()), 1)
    indices = torch.full((b, h, groups, length), pad, dtype=torch.int32)
    for i in range(b):
        for j in range(h):
            for g in range(groups):
                c = int(counts[i, j, g])
                rows = (torch.randint(0, s_kv, (c,)) if duplicates
                        else torch.randperm(s_kv)[:c])
                indices[i, j, g, :c] = rows.int()
    return indices.cuda(), counts.cuda()


def check(o, lse, ref_o, ref_lse):
    visible = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), visible)
    torch.testing.assert_close(lse[visible], ref_lse[visible], rtol=0, atol=1e-3)
    assert not torch.isnan(o).any()
    assert (o[~visible] == 0).all()  # rows of an empty group
    if visible.any():
        err = (o.float()[visible] - ref_o[visible]).norm() / ref_o[visible].norm()
        assert err.item() < 1e-2, err.item()


S_KV = 1500


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [64, 128, 192])
@pytest.mark.parametrize("count", [0, 1, 17, 191, 192, 1000, S_KV])
def test_matches_reference(d, group, count):
    """Every group attends to ``count`` unsorted distinct rows; S_q = 1000 is no multiple of
    any group; GQA (4 query heads on 2 kv heads), B = 2, strided q and k."""
    b, h, h_kv, s_q = 2, 4, 2, 1000
    q, k, v = qkv(b, h, h_kv, s_q, S_KV, d)
    indices, counts = make_indices(b, h, s_q, S_KV, group, count)
    o, lse = run(q, k, v, indices, counts, group)
    check(o, lse, *reference(q, k, v, indices, counts, group))
    if count == S_KV:  # every key, permuted: dense attention
        check(o, lse, *attention_reference(q, k, v))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [64, 192])
def test_duplicates_and_mixed_counts(d, group):
    """Indices drawn with replacement (a duplicate counts twice), each group its own count
    (0 and S_kv among them), a list longer than every count padded with garbage."""
    b, h, h_kv, s_q, s_kv = 2, 2, 1, 777, 640
    q, k, v = qkv(b, h, h_kv, s_q, s_kv, d, strided=False)
    groups = -(-s_q // group)
    counts = torch.randint(0, 2 * s_kv, (b, h, groups))
    counts[0, 0, 0], counts[-1, -1, -1], counts[0, -1, 0] = 0, s_kv, 1
    indices, counts = make_indices(b, h, s_q, s_kv, group, counts, length=2 * s_kv + 5,
                                   duplicates=True)
    o, lse = run(q, k, v, indices, counts, group)
    check(o, lse, *reference(q, k, v, indices, counts, group))


def test_out_of_range_indices_are_clamped():
    """An index outside [0, S_kv) reads the nearest row instead of out of bounds (the op
    rejects such indices in its debug mode; the kernel only stays in bounds)."""
    b, h, s_q, s_kv, group = 1, 2, 200, 300, 64
    q, k, v = qkv(b, h, h, s_q, s_kv, 64)
    indices, counts = make_indices(b, h, s_q, s_kv, group, 100)
    indices[..., 0], indices[..., 1] = -7, s_kv + 1000
    o, lse = run(q, k, v, indices, counts, group)
    check(o, lse, *reference(q, k, v, indices, counts, group))


@pytest.mark.parametrize("config", [dict(block_m=192, block_n=96)], ids=str)
def test_192_row_tile(config):
    """The 192-row option (one CTA per group) at D = 64."""
    b, h, s_q, s_kv, group = 2, 2, 1000, 1111, 192
    q, k, v = qkv(b, h, 1, s_q, s_kv, 64)
    indices, counts = make_indices(b, h, s_q, s_kv, group, torch.randint(0, s_kv, (b, h, 6)))
    o, lse = run(q, k, v, indices, counts, group, **config)
    check(o, lse, *reference(q, k, v, indices, counts, group))


def test_fp_scale_and_single_row():
    """A non-default scale; S_q = 1 (one group, one row); S_kv = 1."""
    q, k, v = qkv(1, 1, 1, 1, 1, 128)
    indices, counts = make_indices(1, 1, 1, 1, 128, 1)
    o, lse = run(q, k, v, indices, counts, 128, scale=0.3)
    check(o, lse, *reference(q, k, v, indices, counts, 128, scale=0.3))
