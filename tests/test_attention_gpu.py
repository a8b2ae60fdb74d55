"""Flash attention forward and its column-sum variant on the GPU against fp32 references,
both paths (the Ampere kernels run forced on Hopper)."""

import os

import pytest
import torch
from gpu_paths import HOPPER, PATHS  # tests/ is on pytest's path

import cute_kernels as ck
from cute_kernels.ops.attention import (
    _attention,
    _attention_colsum,
    attention_colsum_reference,
    attention_reference,
    torch_attention,
)

pytestmark = pytest.mark.gpu


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm()).item()


def qkv(b, h, h_kv, s_q, s_kv, d, dtype=torch.bfloat16):
    q = torch.randn(b, s_q, h, d, device="cuda").to(dtype).transpose(1, 2)  # strided view
    k = torch.randn(b, h_kv, s_kv, d, device="cuda").to(dtype)
    v = torch.randn(b, h_kv, s_kv, d, device="cuda").to(dtype)
    return q, k, v


def check(o, lse, q, k, v, causal):
    ref_o, ref_lse = attention_reference(q, k, v, causal=causal)
    visible = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), visible)
    torch.testing.assert_close(lse[visible], ref_lse[visible], rtol=0, atol=1e-3)
    assert not torch.isnan(o).any()
    torch_o = torch_attention(q, k, v, causal=causal)  # torch's own, same conventions
    assert rel_err(o, ref_o) <= 2 * rel_err(torch_o, ref_o) + 1e-6


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s_q, s_kv, h, h_kv", [(1, 1, 2, 2), (17, 17, 4, 2), (1000, 1000, 2, 1),
                                                (128, 4097, 2, 2), (300, 77, 2, 2),
                                                (4097, 1000, 1, 1),
                                                # D = 64: 192-row tiles (tall)
                                                (2100, 4097, 2, 1), (4097, 2100, 2, 2)])
def test_matches_reference(path, d, causal, s_q, s_kv, h, h_kv):
    q, k, v = qkv(2, h, h_kv, s_q, s_kv, d)
    poisoned = torch.full_like(q, float("nan"))
    with ck.force_path(path):
        o, lse = ck.attention(q, k, v, causal=causal, return_lse=True, out=poisoned)
    assert o is poisoned
    check(o, lse, q, k, v, causal)


# the Hopper kernel's other code paths (the defaults cover overlap at D = 128 and the
# sequential loop at D = 64, on 128- and 192-row tiles)
CONFIGS = [dict(), dict(overlap=True), dict(block_m=192), dict(block_m=192, block_n=64),
           dict(block_n=176, overlap=True), dict(pingpong=True),
           dict(block_m=192, pingpong=True), dict(persistent=True),
           dict(overlap=True, persistent=True), dict(overlap=True, pingpong=True),
           dict(overlap=True, persistent=True, pingpong=True, async_store=False),
           # 64-key tiles, overlapped: a consumer skips a first block the causal mask hides
           # from all its rows (two consumers in turns; three, each skipping its own)
           dict(block_n=64, stages=3, overlap=True, pingpong=True),
           dict(block_m=192, block_n=64, overlap=True)]
# (192 rows x 2 Q stages: D = 64 only, below)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU")
@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("d, causal", [(64, True), (128, False)])
def test_hopper_configs(config, d, causal):
    q, k, v = qkv(1, 2, 1, 1000, 1111, d)
    poisoned = torch.full_like(q, float("nan"))
    o, lse = _attention(q, k, v, causal=causal, out=poisoned, config=config)
    check(o, lse, q, k, v, causal)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU")
@pytest.mark.parametrize("config", [dict(persistent=True), dict(overlap=True, persistent=True),
                                    dict(overlap=True, persistent=True, pingpong=True),
                                    dict(block_m=192, persistent=True),
                                    dict(block_m=192, overlap=True, persistent=True),
                                    dict(block_m=192, overlap=True, persistent=True,
                                         pingpong=True),
                                    dict(block_m=64, block_n=64, stages=2, overlap=True,
                                         ctas_per_sm=2, persistent=True)], ids=str)
@pytest.mark.parametrize("causal, s_q, s_kv", [(True, 4097, 4097), (True, 3000, 5001),
                                               (False, 4097, 777)])
def test_persistent_ctas_walk_many_tiles(config, causal, s_q, s_kv):
    """More tiles than SMs: each CTA carries its pipelines from tile to tile (and causal
    tiles run longest first), GQA, a strided q, a poisoned output."""
    d = 64 if config.get("block_m") == 192 else 128
    q, k, v = qkv(2, 8, 2, s_q, s_kv, d)
    poisoned = torch.full_like(q, float("nan"))
    o, lse = _attention(q, k, v, causal=causal, out=poisoned, config=config)
    check(o, lse, q, k, v, causal)


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU")
@pytest.mark.parametrize("b, h, h_kv, s_q, s_kv, dtype", [
    (4, 16, 4, 1500, 1500, torch.bfloat16),  # 768 tiles: several per CTA
    (2, 6, 2, 500, 1499, torch.float16),  # S_q < S_kv
    (3, 4, 4, 2048, 333, torch.bfloat16),  # S_q > S_kv: rows that see no key
    (1, 2, 1, 65, 65, torch.bfloat16),  # one full and one 1-row tile
])
def test_short_causal_route(b, h, h_kv, s_q, s_kv, dtype):
    """Short causal D = 128, unpacked and unsplit (asserted), takes the persistent route of
    long causal attention (128 x 128 tiles, the consumers taking turns, walks dealt on the
    host: ``plan.order``). GQA, fp16, residue tiles, a poisoned output, against the float32
    reference."""
    from cute_kernels.ops.attention import make_plan

    q, k, v = qkv(b, h, h_kv, s_q, s_kv, 128, dtype)
    plan = make_plan(q, k, True, 128 ** -0.5, 1)
    assert plan.pack is None and plan.splits == 1 and plan.order is not None
    poisoned = torch.full_like(q, float("nan"))
    o, lse = ck.attention(q, k, v, causal=True, return_lse=True, out=poisoned)
    assert o is poisoned
    check(o, lse, q, k, v, True)


@pytest.mark.parametrize("path", PATHS)
def test_default_output_is_fresh_fp16_and_scaled(path):
    q, k, v = qkv(1, 4, 4, 333, 500, 64, torch.float16)
    with ck.force_path(path):
        o = ck.attention(q, k, v, scale=0.3)
    assert o.dtype == torch.float16 and o.shape == q.shape
    ref_o, _ = attention_reference(q, k, v, scale=0.3)
    assert rel_err(o, ref_o) < 5e-3


@pytest.mark.parametrize("path", PATHS)
def test_very_negative_logits_stay_finite(path):
    """Causal rows whose first key block is fully masked, then all logits near -96: the
    online rescale must not turn 0 * inf into NaN."""
    q = torch.ones(1, 2, 256, 64, device="cuda").bfloat16()
    k = torch.full((1, 2, 256, 64), -12.0, device="cuda").bfloat16()
    v = torch.randn(1, 2, 256, 64, device="cuda").bfloat16()
    with ck.force_path(path):
        o, lse = ck.attention(q, k, v, causal=True, return_lse=True)
    ref_o, ref_lse = attention_reference(q, k, v, causal=True)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-3)
    assert rel_err(o, ref_o) < 1e-2


@pytest.mark.skipif(not HOPPER, reason="torch.compile of the custom op is checked on Hopper")
def test_torch_compile():
    q, k, v = qkv(1, 2, 2, 300, 300, 128)
    fn = torch.compile(lambda q, k, v: ck.attention(q, k, v, causal=True) * 2, fullgraph=True)
    ref_o, _ = attention_reference(q, k, v, causal=True)
    assert rel_err(fn(q, k, v) / 2, ref_o) < 1e-2


def test_rejects_grad():
    q, k, v = qkv(1, 1, 1, 8, 8, 64)
    q.requires_grad_(True)
    with pytest.raises(NotImplementedError, match="no backward"):
        ck.attention(q, k, v)
    with torch.no_grad():
        ck.attention(q, k, v)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [192, 128])
@pytest.mark.parametrize("s_q, s_kv, h, h_kv", [(192, 64, 3, 3), (1000, 777, 2, 1),
                                                (17, 4097, 2, 2)])
def test_colsum_matches_reference(path, d, group, s_q, s_kv, h, h_kv):
    q, k, v = qkv(2, h, h_kv, s_q, s_kv, d)
    # the previous step's normalisers: this step's lse, perturbed (so p_prev != p)
    _, lse0 = attention_reference(q, k, v)
    prev = lse0 + 0.1 * torch.randn_like(lse0)
    with ck.force_path(path):
        o, lse, colsum = ck.attention_colsum(q, k, v, prev, group=group)
    ref_o, ref_lse, ref_colsum = attention_colsum_reference(q, k, v, prev, group=group)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-3)
    assert rel_err(o, ref_o) <= 2 * rel_err(torch_attention(q, k, v), ref_o) + 1e-6
    assert colsum.shape == ref_colsum.shape
    assert ((colsum - ref_colsum).abs() / ref_colsum.abs().clamp_min(1e-6)).max() < 1e-2


# the Hopper column-sum code paths beyond the defaults (MMA sums in the overlapped 128-row
# kernel at D = 128, shuffle sums in the 192-row kernel at D = 64 / group 192, MMA sums in the
# 192-row kernel at D = 64 / group 128)
COLSUM_CONFIGS = [dict(), dict(pingpong=True), dict(block_m=192, block_n=64),
                  dict(block_m=192, pingpong=True), dict(block_m=192, colsum_method="shuffle"),
                  dict(overlap=True), dict(overlap=True, colsum_method="shuffle", block_m=128),
                  dict(block_m=192, colsum_method="mma_sync"),
                  dict(colsum_method="mma_sync", pingpong=True),
                  dict(overlap=True, colsum_method="mma_sync")]


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU")
@pytest.mark.parametrize("config", COLSUM_CONFIGS, ids=str)
@pytest.mark.parametrize("group", [128, 192])
@pytest.mark.parametrize("d, dtype", [(64, torch.bfloat16), (128, torch.float16)])
def test_hopper_colsum_configs(config, group, d, dtype):
    if config.get("colsum_method") == "shuffle" and config.get("block_m", 128) != group:
        pytest.skip("shuffle sums need the query tile to be the group")
    from cute_kernels.kernels.attention.sm90 import AttentionSm90

    cfg = dict(config, colsum=True, group=group)
    try:
        AttentionSm90(d, False, **cfg)
    except ValueError as err:  # a tile that does not fit is refused before compiling
        assert "shared memory" in str(err) and d == 128 and config.get("block_m") == 192
        return
    q, k, v = qkv(2, 3, 1, 1000, 777, d, dtype)
    _, lse0 = attention_reference(q, k, v)
    prev = lse0 + 0.1 * torch.randn_like(lse0)
    scale = d ** -0.5
    o, lse, colsum = _attention_colsum(q, k, v, prev, group, scale, config=cfg)
    ref_o, ref_lse, ref_colsum = attention_colsum_reference(q, k, v, prev, group=group)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-3)
    assert rel_err(o, ref_o) <= 2 * rel_err(torch_attention(q, k, v), ref_o) + 1e-6
    assert ((colsum - ref_colsum).abs() / ref_colsum.abs().clamp_min(1e-6)).max() < 1e-2


@pytest.mark.parametrize("path", PATHS)
def test_colsum_is_deterministic(path):
    """Where a group spans two CTAs, the kernels add two partial sums per element onto zeros:
    order-free. Both groups, both head dims (Hopper: MMA and shuffle sums, stores and adds)."""
    for d in (64, 128):
        q, k, v = qkv(1, 2, 2, 1000, 999, d)
        prev = attention_reference(q, k, v)[1]
        for group in (128, 192):
            with ck.force_path(path):
                first = ck.attention_colsum(q, k, v, prev, group=group)[2]
                again = ck.attention_colsum(q, k, v, prev, group=group)[2]
            assert torch.equal(first, again), (d, group)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("s_q, s_kv, causal, splits", [(1, 4097, False, 8), (8, 20000, True, 16),
                                                       (1, 1, False, 4), (300, 200, True, 3),
                                                       (16, 1000, False, 64)])
def test_split_kv_decode_matches_reference(path, s_q, s_kv, causal, splits):
    """num_splits (flash-decoding): decode-like shapes, GQA, more splits than key blocks
    (clamped), queries with no key (causal, S_q > S_kv); o and lse against the float32
    reference."""
    torch.manual_seed(int.from_bytes(os.urandom(4), "little") % 2**31)
    q = torch.randn(2, 8, s_q, 128, device="cuda").bfloat16()
    k = torch.randn(2, 2, s_kv, 128, device="cuda").bfloat16()
    v = torch.randn(2, 2, s_kv, 128, device="cuda").bfloat16()
    with ck.force_path(path):
        o, lse = ck.attention(q, k, v, causal=causal, return_lse=True, num_splits=splits)
    want, want_lse = attention_reference(q, k, v, causal=causal)
    assert (o.float() - want).abs().max().item() < 2e-2
    assert o.dtype == q.dtype and o.stride() == q.stride()
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse[finite], want_lse[finite], atol=2e-3, rtol=2e-3)
    out = torch.full_like(q, float("nan"))
    with ck.force_path(path):
        assert ck.attention(q, k, v, causal=causal, out=out, num_splits=splits) is out
    assert (out.float() - want).abs().max().item() < 2e-2


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("splits", [1, 3, 40])
def test_split_combine_kernel_matches_combine_splits(d, splits):
    """The combine kernel against its torch reference on random partials: splits that saw no
    key (lse -inf), a row no split saw (o 0, lse -inf), a strided output, more splits than a
    warp has lanes."""
    from cute_kernels.ops.attention import combine_kernel, combine_splits

    torch.manual_seed(int.from_bytes(os.urandom(4), "little") % 2**31)
    b, h, s = 2, 3, 5
    o_parts = torch.randn(splits * b, h, s, d, device="cuda").bfloat16()
    lse_parts = torch.randn(splits * b, h, s, device="cuda") * 4
    lse_parts[0, 0, 1] = float("-inf")
    lse_parts.view(splits, b, h, s)[:, 1, 2, 3] = float("-inf")  # no split saw this row
    o = torch.full((b, s, h, d), float("nan"), device="cuda").bfloat16().transpose(1, 2)
    lse = torch.full((b, h, s), float("nan"), device="cuda")
    combine_kernel(o_parts, lse_parts, o, lse)
    want, want_lse = combine_splits(o_parts.view(splits, b, h, s, d),
                                    lse_parts.view(splits, b, h, s))
    assert (o.float() - want).abs().max().item() < 2e-2
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and not bool(finite[1, 2, 3])
    torch.testing.assert_close(lse[finite], want_lse[finite], atol=1e-4, rtol=1e-5)
    assert bool((o[1, 2, 3] == 0).all())


def _spy_plans(monkeypatch):
    """The plans ``attention`` makes from now on (a fresh plan cache)."""
    from cute_kernels.ops import attention as attn

    made = []
    real = attn.make_plan

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(attn, "make_plan", spy)
    monkeypatch.setattr(attn, "_PLANS", {})
    return made


@pytest.mark.skipif(not HOPPER, reason="the cluster combine is the sm_90 path's")
@pytest.mark.parametrize("b, h, h_kv, s_q, s_kv, d, causal, splits", [
    (1, 32, 8, 1, 4097, 128, False, 8),  # a residue key block; 4 packed rows of 64
    (3, 8, 2, 8, 9000, 64, False, 5),  # D = 64, an odd split count
    (2, 4, 4, 7, 3000, 128, True, 3),  # unpacked (MHA), causal, 7 rows
    (1, 8, 1, 8, 700, 128, False, 6),  # 64 packed rows (a full tile), 6 ranges of ~1 block
    (2, 16, 2, 1, 129, 128, False, 2),  # a range of one key
    (1, 2, 2, 40, 300, 128, True, 3)])  # causal rows whose last range sees few or no keys
def test_cluster_combine_matches_reference(b, h, h_kv, s_q, s_kv, d, causal, splits,
                                           monkeypatch):
    """Split-KV whose splits combine in a cluster through DSMEM (the Hopper route for 2-8
    splits of 64-row tiles): o and lse against the float32 reference, written into a
    poisoned ``out``; the route asserted, so a change of route fails here."""
    torch.manual_seed(int.from_bytes(os.urandom(4), "little") % 2**31)
    made = _spy_plans(monkeypatch)
    q, k, v = qkv(b, h, h_kv, s_q, s_kv, d)
    out = torch.full_like(q, float("nan"))
    o, lse = ck.attention(q, k, v, causal=causal, out=out, return_lse=True, num_splits=splits)
    assert o is out and len(made) == 1 and made[0].cluster and made[0].splits == splits
    check(o, lse, q, k, v, causal)


@pytest.mark.skipif(not HOPPER, reason="the swap-AB decode kernel is the sm_90 path's")
@pytest.mark.parametrize("b, h, h_kv, s_q, s_kv, d, causal, splits, cluster, rows", [
    (1, 32, 8, 1, 4097, 128, False, 8, True, 8),  # GQA packed: 4 of 8 rows, a residue block
    (3, 8, 2, 8, 9000, 64, False, 5, False, 32),  # D = 64, 32 packed rows, the combine kernel
    (2, 4, 4, 7, 3000, 128, True, 3, True, 8),  # unpacked (MHA) causal, 7 of 8 rows
    (1, 2, 2, 40, 300, 128, True, 3, True, 40),  # causal rows whose last range sees few keys
    (1, 2, 2, 20, 500, 128, True, 1, False, 8),  # three query tiles per head, unsplit
    (2, 16, 2, 1, 129, 128, False, 2, True, 8),  # a range of one key
    (1, 8, 8, 1, 1, 64, False, 1, False, 8),  # one key
    (1, 4, 4, 8, 3, 64, True, 1, False, 8),  # S_q > S_kv causal: rows that see no key
    (2, 8, 1, 8, 5000, 128, False, 4, True, 64)])  # 64 packed rows, 2 stages
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_swap_ab_decode_matches_reference(b, h, h_kv, s_q, s_kv, d, causal, splits, cluster,
                                          rows, dtype):
    """The swap-AB decode kernel (``DecodeSm90``: keys as the MMA's M, query rows as N),
    forced by ``config`` on the problem as given or, for GQA, with the query heads of a KV
    head packed into its tile as the op packs them: o and lse against the float32 reference,
    written into a poisoned ``out``."""
    from cute_kernels.tuning.attention import decode_config

    torch.manual_seed(int.from_bytes(os.urandom(4), "little") % 2**31)
    q, k, v = qkv(b, h, h_kv, s_q, s_kv, d, dtype)
    packed = h_kv < h
    shape = (b, h_kv, (h // h_kv) * s_q, d) if packed else q.shape
    q_run = q.contiguous().view(shape) if packed else q
    config = decode_config(d, rows, splits if cluster else 1)
    assert config["decode_rows"] in (8, 16, 32, 64) and config["decode_rows"] >= rows
    out = torch.full(shape, float("nan"), device="cuda", dtype=q.dtype)
    o, lse = _attention(q_run, k, v, causal, None, splits, out, config)
    assert o is out
    check(o.view(b, h, s_q, d), lse.view(b, h, s_q), q, k, v, causal)


@pytest.mark.skipif(not HOPPER, reason="the swap-AB decode kernel is the sm_90 path's")
@pytest.mark.parametrize("b, h, h_kv, s_q, s_kv, d, causal, splits, rows", [
    (1, 32, 8, 1, 4097, 128, False, None, 8),  # the default split count, clustered
    (2, 8, 8, 3, 2000, 64, True, 1, 8),  # unpacked causal, unsplit
    (1, 16, 2, 2, 5000, 128, False, 16, 16),  # 16 splits: the combine kernel
    (4, 32, 8, 1, 9000, 128, False, None, 8),  # B4: the default splits, however they combine
    (1, 12, 2, 2, 3000, 64, False, 2, 16)])  # 12 packed rows on a 16-row tile, D = 64
def test_swap_ab_decode_route(b, h, h_kv, s_q, s_kv, d, causal, splits, rows, monkeypatch):
    """The op's decode route on the swap-AB kernel (``DECODE_SWAP_AB``, at most
    ``DECODE_SWAP_AB_MAX_ROWS`` query rows a tile): o and lse against the float32 reference,
    written into a poisoned ``out``; the tile's rows asserted, so a change of route fails.
    K and V are (B, S, H, D) tensors seen through ``.transpose(1, 2)`` (a KV cache's
    layout), q as ``qkv`` makes it."""
    torch.manual_seed(int.from_bytes(os.urandom(4), "little") % 2**31)
    made = _spy_plans(monkeypatch)
    q, k, v = qkv(b, h, h_kv, s_q, s_kv, d)
    k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    out = torch.full_like(q, float("nan"))
    o, lse = ck.attention(q, k, v, causal=causal, out=out, return_lse=True, num_splits=splits)
    assert o is out and len(made) == 1 and made[0].decode_rows == rows
    check(o, lse, q, k, v, causal)


@pytest.mark.skipif(not HOPPER, reason="the cluster combine is the sm_90 path's")
def test_cluster_combine_falls_back_where_clusters_do_not_fit(monkeypatch):
    """More clusters than the GPU holds at once (``cluster_capacity``, patched to 3): the op
    takes the combine kernel instead, and still matches."""
    from cute_kernels.ops import attention as attn

    made = _spy_plans(monkeypatch)
    monkeypatch.setattr(attn, "cluster_capacity", lambda device, n: 3)
    q, k, v = qkv(1, 32, 8, 1, 3000, 128)  # 8 KV heads: 8 clusters
    check(*ck.attention(q, k, v, return_lse=True, num_splits=4), q, k, v, False)
    assert made[0].splits == 4 and not made[0].cluster and made[0].joint


@pytest.mark.skipif(not HOPPER, reason="the cluster combine is the sm_90 path's")
@pytest.mark.parametrize("swap", [True, False])
def test_default_splits_take_clusters_up_to_their_keys(swap, monkeypatch):
    """``num_splits=None`` on B1 decoding: up to ``CLUSTER_SPLITS_MAX_KEYS`` keys 8 splits
    combined in clusters; past it too where their 64 CTAs stream as fast as this GPU's
    memory, else the heuristic's splits through the combine kernel. The 64-row tile's CTAs
    (``DECODE_SWAP_AB`` off) keep up with an H100's memory, not an H200's; the swap-AB
    decode tile's with both."""
    from cute_kernels.runtime.arch import hbm_gbps
    from cute_kernels.tuning import attention as tuning

    monkeypatch.setattr(tuning, "DECODE_SWAP_AB", swap)
    per_cta = tuning.DECODE_CTA_GBPS if swap else tuning.CLUSTER_CTA_GBPS

    made = _spy_plans(monkeypatch)
    q, k, v = qkv(1, 32, 8, 1, 12000, 128)
    check(*ck.attention(q, k, v, return_lse=True), q, k, v, False)
    assert made[-1].splits == 8 and made[-1].cluster
    q, k, v = qkv(1, 32, 8, 1, 40000, 128)
    check(*ck.attention(q, k, v, return_lse=True), q, k, v, False)
    hbm = hbm_gbps(q.device)
    assert 1000 < hbm < 20000  # GB/s: an HBM GPU's
    saturates = 64 * per_cta >= tuning.CLUSTER_HBM_SHARE * hbm
    assert made[-1].cluster == saturates and (made[-1].splits == 8) == saturates
    assert made[-1].decode_rows == (8 if swap else 0)


def test_cluster_capacity_reads_the_gpu():
    """The driver's count of clusters held at once: at least one, at most the SMs over the
    cluster size, no more for bigger clusters, and what the DSL's own query
    (``HardwareInfo``, which compiles a kernel for it) says."""
    from cutlass.utils import HardwareInfo

    from cute_kernels.runtime.arch import cluster_capacity

    device = torch.device("cuda", torch.cuda.current_device())
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    counts = [cluster_capacity(device, n) for n in (2, 4, 8)]
    assert all(1 <= c <= sms // n for c, n in zip(counts, (2, 4, 8)))
    assert counts[0] >= counts[1] >= counts[2]
    dsl = HardwareInfo(device.index)
    assert counts == [min(dsl.get_max_active_clusters(n), sms // n) for n in (2, 4, 8)]


@pytest.mark.parametrize("kernel_combine", [True, False])
def test_split_kv_through_the_combine_kernel(kernel_combine, monkeypatch):
    """The op's split route through either combine (``SPLIT_COMBINE_KERNEL_ON``): the kernel
    (the default) or ``combine_splits`` in torch."""
    from cute_kernels.ops import attention as attn
    from cute_kernels.tuning import attention as tuning

    monkeypatch.setattr(attn, "SPLIT_COMBINE_KERNEL_ON", kernel_combine)
    monkeypatch.setattr(tuning, "CLUSTER_COMBINE", False)  # 8 splits would combine in clusters
    q = torch.randn(2, 8, 3, 128, device="cuda").bfloat16()
    k = torch.randn(2, 2, 5000, 128, device="cuda").bfloat16()
    v = torch.randn(2, 2, 5000, 128, device="cuda").bfloat16()
    o, lse = attn._attention(q, k, v, False, None, 8)
    want, want_lse = attention_reference(q, k, v)
    assert (o.float() - want).abs().max().item() < 2e-2
    torch.testing.assert_close(lse, want_lse, atol=2e-3, rtol=2e-3)


def test_num_splits_none_splits_long_keys(monkeypatch):
    """The default ``num_splits=None`` splits decoding over long keys (auto_splits) and the
    result still matches the float32 reference; short keys stay unsplit."""
    from cute_kernels.ops import attention as attn

    taken = []
    real = attn.make_plan

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        taken.append(plan.splits)
        return plan

    monkeypatch.setattr(attn, "make_plan", spy)
    monkeypatch.setattr(attn, "_PLANS", {})
    q, k, v = qkv(1, 8, 2, 1, 9000, 128)
    o, lse = ck.attention(q, k, v, return_lse=True)
    assert taken and taken[0] > 1
    check(o, lse, q, k, v, False)
    taken.clear()
    q, k, v = qkv(1, 8, 2, 1, 4100, 128)  # a residue block, split too (from 4,096 keys)
    check(*ck.attention(q, k, v, return_lse=True), q, k, v, False)
    assert taken and taken[0] > 1
    taken.clear()
    q, k, v = qkv(1, 8, 2, 1, 3000, 128)
    check(*ck.attention(q, k, v, return_lse=True), q, k, v, False)
    assert taken == [1]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("s_q, causal", [(1, True), (1, False), (5, False), (40, False)])
def test_gqa_decode_packs_query_heads(path, s_q, causal):
    """GQA with fewer query rows than a tile: the op packs each KV head's query heads into
    shared tiles (packs_query_heads); o (into a poisoned out, q stored (B, S, H, D)) and lse
    against the float32 reference."""
    from cute_kernels.ops.attention import packs_query_heads

    assert packs_query_heads(16, 4, s_q, causal)
    q, k, v = qkv(3, 16, 4, s_q, 777, 128)
    poisoned = torch.full_like(q, float("nan"))
    with ck.force_path(path):
        o, lse = ck.attention(q, k, v, causal=causal, return_lse=True, out=poisoned)
    assert o is poisoned
    check(o, lse, q, k, v, causal)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("s_q, s_kv, splits", [(1, 4097, None), (8, 9000, None), (1, 3000, 4),
                                               (200, 333, 1)])
def test_repeat_calls_run_the_cached_plan_on_fresh_data(path, s_q, s_kv, splits):
    """The second and third calls with the same metadata take the cached plan (no checks):
    each reads its own inputs and writes its own out (poisoned first), and an out that
    overlaps q is still refused."""
    with ck.force_path(path):
        for _ in range(3):
            q, k, v = qkv(2, 16, 4, s_q, s_kv, 128)
            out = torch.full_like(q, float("nan"))
            o, lse = ck.attention(q, k, v, return_lse=True, out=out, num_splits=splits)
            assert o is out
            check(o, lse, q, k, v, False)
        for _ in range(2):
            with pytest.raises(ValueError, match="out"):
                ck.attention(q, k, v, out=q, num_splits=splits)


def check_graph_replays(call, inputs, fresh_inputs, causal):
    """Capture ``call(*inputs)`` -> (o, lse) in a CUDA graph after two warm-up calls on a side
    stream (compile, plan, allocator off the capture); replay it twice on fresh inputs copied
    into the captured ones, O and lse poisoned before each replay, against the reference."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = call(*inputs)
    for _ in range(2):
        fresh = fresh_inputs()
        for dst, src in zip(inputs, fresh):
            dst.copy_(src)
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(o, lse, *fresh, causal)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("b, s_q, s_kv, splits", [(1, 1, 4097, None), (3, 8, 9000, None),
                                                  (2, 1, 2048, 16)])
def test_split_decode_captures_in_a_cuda_graph(path, b, s_q, s_kv, splits):
    """Split-KV decode (the default splits, or many short ranges) captured in a CUDA graph: the
    split kernel and the combine kernel (one host call; on sm_90 the combine a programmatic
    dependent launch) replay on fresh inputs and match the reference."""
    with ck.force_path(path):
        check_graph_replays(
            lambda q, k, v: ck.attention(q, k, v, return_lse=True, num_splits=splits),
            qkv(b, 32, 8, s_q, s_kv, 128), lambda: qkv(b, 32, 8, s_q, s_kv, 128), False)


@pytest.mark.parametrize("s_q, s_kv, causal, d", [(333, 700, False, 128), (333, 700, True, 128),
                                                  (2100, 2500, True, 128),
                                                  (700, 4100, False, 128),
                                                  (333, 2500, False, 64),
                                                  (2100, 2500, True, 64),
                                                  (2100, 2500, False, 64)])
def test_persistent_default_captures_in_a_cuda_graph(s_q, s_kv, causal, d):
    """The persistent schedule by default (D = 128 non-causal up to 8,192 keys; causal: 128 x
    64 tiles up to 1,536 keys, 128 x 128 past it; D = 64: 64-row tiles two CTAs per SM, 192-row
    tiles for S_q and S_kv >= TALL_TILE_MIN_SEQ (causal with TALL_TURNS)), its
    walks made at the first, warm-up call; captured in a CUDA graph,
    replays on new inputs copied into the captured ones match the reference."""
    from cute_kernels.ops.attention import make_plan

    q, k, v = qkv(2, 4, 2, s_q, s_kv, d)
    assert make_plan(q, k, causal, d ** -0.5, 1).order is not None
    check_graph_replays(
        lambda q, k, v: ck.attention(q, k, v, causal=causal, return_lse=True), (q, k, v),
        lambda: qkv(2, 4, 2, s_q, s_kv, d), causal)
