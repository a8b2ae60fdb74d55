"""The attention references and argument rules (CPU): what the attention kernels must match."""

import math

import pytest
import torch
import torch.nn.functional as F

from cute_kernels import reference
from cute_kernels.ops.attention import validate_attention


def attention_reference(q, k, v, **kw):
    """(o, lse) of the public float32 reference."""
    return reference.attention(q, k, v, return_lse=True, **kw)


def qkv(b=2, h=4, h_kv=2, s_q=33, s_kv=33, d=64, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    mk = lambda hh, s: torch.randn(b, hh, s, d, generator=g).to(dtype)  # noqa: E731
    return mk(h, s_q), mk(h_kv, s_kv), mk(h_kv, s_kv)


@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_math_with_gqa(causal):
    q, k, v = qkv()
    o, lse = attention_reference(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(2, 1),
                                         v.float().repeat_interleave(2, 1), is_causal=causal)
    torch.testing.assert_close(o, ref, rtol=1e-4, atol=1e-4)
    s = (q.float() @ k.float().repeat_interleave(2, 1).transpose(-1, -2)) / math.sqrt(64)
    if not causal:
        torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)


def test_causal_is_bottom_right_aligned():
    q, k, v = qkv(s_q=3, s_kv=7)
    o, lse = attention_reference(q, k, v, causal=True)
    # the last query sees every key; the first sees keys 0..4
    full, _ = attention_reference(q[:, :, 2:], k, v)
    torch.testing.assert_close(o[:, :, 2:], full)
    first, _ = attention_reference(q[:, :, :1], k[:, :, :5], v[:, :, :5])
    torch.testing.assert_close(o[:, :, :1], first)
    # more queries than keys: the first rows see nothing (o = 0, lse = -inf)
    o, lse = attention_reference(*qkv(s_q=7, s_kv=3), causal=True)
    assert torch.all(o[:, :, :4] == 0) and torch.all(torch.isneginf(lse[:, :, :4]))
    assert torch.isfinite(lse[:, :, 4:]).all()


def test_colsum_is_grouped_column_sums_of_previous_step_probabilities():
    q, k, v = qkv(s_q=400, s_kv=50)
    _, lse = attention_reference(q, k, v)
    o, lse2, colsum = reference.attention_colsum(q, k, v, lse, group=128)
    assert colsum.shape == (2, 4, 4, 50)
    # with the same step's lse, each query row's probabilities sum to 1: groups sum to rows
    torch.testing.assert_close(colsum.sum(-1)[:, :, :3], torch.full((2, 4, 3), 128.0))
    torch.testing.assert_close(colsum.sum(-1)[:, :, 3], torch.full((2, 4), 16.0))
    torch.testing.assert_close(lse2, lse)


def test_argument_rules():
    q, k, v = qkv()
    assert validate_attention(q, k, v) == pytest.approx(1 / 8)
    with pytest.raises(ValueError, match="head dim must be one of"):
        validate_attention(q[..., :32], k[..., :32], v[..., :32])
    with pytest.raises(ValueError, match="multiple of the kv heads"):
        validate_attention(q[:, :3], k, v)
    with pytest.raises(TypeError, match="same dtype"):
        validate_attention(q, k.half(), v)
    with pytest.raises(ValueError, match="unit-stride last"):
        validate_attention(q.transpose(-1, -2), k, v)
    with pytest.raises(ValueError, match="scale must be a finite number > 0, got -1.0"):
        validate_attention(q, k, v, scale=-1.0)
    # (B, S, H, D) storage through transpose(1, 2) is accepted without a copy
    qs = torch.randn(2, 33, 4, 64).bfloat16().transpose(1, 2)
    assert validate_attention(qs, k, v) == pytest.approx(1 / 8)


@pytest.mark.parametrize("s_q, s_kv, causal", [(33, 33, False), (5, 9, True), (9, 5, True)])
def test_torch_baseline_uses_the_same_conventions(s_q, s_kv, causal):
    from cute_kernels.ops.attention import torch_attention

    q, k, v = qkv(s_q=s_q, s_kv=s_kv)
    ref, _ = attention_reference(q, k, v, causal=causal)
    ours = torch_attention(q.float(), k.float(), v.float(), causal=causal)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_public_api_rejects_bad_input_before_launch():
    """Each rule names its argument; CPU tensors pass the shape rules and stop at the device
    check, so nothing compiles or launches."""
    import cute_kernels as ck

    q, k, v = qkv()
    with pytest.raises(TypeError, match="q must have dtype"):
        ck.attention(q.float(), k.float(), v.float())
    with pytest.raises(TypeError, match="causal must be a bool"):
        ck.attention(q, k, v, causal=1)
    with pytest.raises(ValueError, match="CUDA|cuda"):
        ck.attention(q, k, v)
    prev = torch.zeros(q.shape[:3])
    with pytest.raises(ValueError, match="group must be one of"):
        ck.attention_colsum(q, k, v, prev, group=64)
    with pytest.raises(ValueError, match="prev_lse must have shape"):
        ck.attention_colsum(q, k, v, prev[:, :, :-1])
    with pytest.raises(TypeError, match="prev_lse"):
        ck.attention_colsum(q, k, v, prev.double())


@pytest.mark.parametrize("scale", ["0.1", b"0.1", [0.125], True, 1j, object()])
def test_scale_that_is_not_a_number_is_a_type_error(scale):
    """Not a number at all: TypeError naming ``scale``, from the ops and the references."""
    import cute_kernels as ck

    q, k, v = qkv()
    prev = torch.zeros(q.shape[:3])
    with pytest.raises(TypeError, match="scale must be a number"):
        ck.attention(q, k, v, scale=scale)
    with pytest.raises(TypeError, match="scale must be a number"):
        ck.attention_colsum(q, k, v, prev, scale=scale)
    with pytest.raises(TypeError, match="scale must be a number"):
        reference.attention(q, k, v, scale=scale)


def test_scale_tensor_gets_a_hint():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"scale must be a number.*scale\.item\(\)"):
        validate_attention(q, k, v, scale=torch.tensor(0.125))


@pytest.mark.parametrize("scale", [0, -0.5, float("nan"), float("inf"), -float("inf")])
def test_scale_that_is_not_a_positive_finite_number_is_a_value_error(scale):
    import cute_kernels as ck

    q, k, v = qkv()
    prev = torch.zeros(q.shape[:3])
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        ck.attention(q, k, v, scale=scale)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        ck.attention_colsum(q, k, v, prev, scale=scale)


def test_numeric_scales_are_accepted():
    import numpy as np

    q, k, v = qkv()
    for scale in (1, 0.125, np.float32(0.125), np.float64(0.125), np.int64(1)):
        got = validate_attention(q, k, v, scale=scale)
        assert type(got) is float and got == pytest.approx(float(scale))


def test_out_must_not_alias_the_inputs():
    from cute_kernels.runtime.validate import check_no_overlap

    buf = torch.empty(4, 64)
    check_no_overlap("out", buf[:2], buf[2:])
    with pytest.raises(ValueError, match="out must not overlap"):
        check_no_overlap("out", buf[1:3], buf[2:])


def test_hopper_kernel_refuses_tiles_past_shared_memory():
    """A Hopper tile whose K/V stages, P and sums exceed 227 KiB is refused at construction,
    naming the budget (not at launch)."""
    from cute_kernels.kernels.attention.sm90 import AttentionSm90

    with pytest.raises(ValueError, match="shared memory"):
        AttentionSm90(128, False, block_m=192, colsum=True)
    with pytest.raises(ValueError, match="shared memory"):
        AttentionSm90(128, False, block_n=256, stages=3)
    assert AttentionSm90(128, False, overlap=True, colsum=True).smem_bytes() <= 232448


def test_hopper_kernel_refuses_bad_column_sum_options():
    """Column-sum options are checked at construction, each error naming the option."""
    from cute_kernels.kernels.attention.sm90 import AttentionSm90

    with pytest.raises(ValueError, match="colsum_method must be"):
        AttentionSm90(64, False, colsum=True, colsum_method="atomics")
    with pytest.raises(ValueError, match="multiple of 64"):
        AttentionSm90(64, False, colsum=True, colsum_method="mma_sync", block_n=96)
    with pytest.raises(ValueError, match="colsum_stages"):
        AttentionSm90(64, False, colsum=True, colsum_stages=1)
    with pytest.raises(ValueError, match="block_m == group"):
        AttentionSm90(64, False, colsum=True, colsum_method="shuffle", group=192)
    # mma.sync sums, like wgmma sums, take any group with any tile
    assert AttentionSm90(64, False, block_m=192, colsum=True, colsum_method="mma_sync",
                         group=128).colsum_atomic


def test_split_kv_combine_is_the_softmax_over_all_keys():
    """combine_splits (split-KV's merge): partial (O, lse) over key ranges, one of them empty,
    combine to attention over every key."""
    from cute_kernels.ops.attention import attention_reference, combine_splits

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 64, generator=g).bfloat16()
    k = torch.randn(2, 3, 300, 64, generator=g).bfloat16()
    v = torch.randn(2, 3, 300, 64, generator=g).bfloat16()
    want, want_lse = attention_reference(q, k, v)
    parts, lses = [], []
    for lo, hi in ((0, 128), (128, 128), (128, 300)):
        if hi > lo:
            o, lse = attention_reference(q, k[:, :, lo:hi], v[:, :, lo:hi])
        else:  # an empty split: o = 0, lse = -inf
            o, lse = torch.zeros_like(want), torch.full_like(want_lse, float("-inf"))
        parts.append(o)
        lses.append(lse)
    o, lse = combine_splits(torch.stack(parts), torch.stack(lses))
    torch.testing.assert_close(o, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse, atol=1e-5, rtol=1e-5)
    o, lse = combine_splits(torch.zeros(2, 1, 4), torch.full((2, 1), float("-inf")))
    assert bool((o == 0).all()) and bool((lse == float("-inf")).all())  # no key at all


def test_decode_route_combines_splits_in_clusters(monkeypatch):
    """The route of Hopper decoding with 2-8 splits of 64-row tiles: the splits of a tile one
    cluster (its build's ``cluster_splits``, said by ``describe``), unless the clusters do not
    all fit at once, more splits, the Ampere path, longer query tiles or the switch off."""
    from cute_kernels.ops.attention import attention_route
    from cute_kernels.tuning import attention as tuning

    def route(splits=8, hopper=True, capacity=None, s_q=1):
        return attention_route(1, 32, 8, s_q, 65536, 128, False, splits, hopper, capacity)

    taken = route(capacity=lambda n: 8 if n == 8 else 0)  # 8 KV heads: 8 clusters fit
    assert taken.cluster and taken.hopper_config(128)["cluster_splits"] == 8
    assert "through DSMEM" in taken.describe(128) and "combine kernel" not in taken.describe(128)
    assert route(splits=3).hopper_config(128)["cluster_splits"] == 3
    assert not route(capacity=lambda n: 7).cluster
    assert not route(splits=16).cluster and "combine kernel" in route(splits=16).describe(128)
    assert not route(hopper=False).cluster
    assert not route(s_q=200).cluster  # 200 query rows a head: 128-row tiles
    assert "cluster_splits" not in route(splits=1).hopper_config(128)
    from cute_kernels.tuning.attention import hopper_config

    with pytest.raises(ValueError, match="short-query split-KV"):
        hopper_config(128, False, split_kv=True, cluster_splits=4)  # 128-row tiles
    monkeypatch.setattr(tuning, "CLUSTER_COMBINE", False)
    assert not route().cluster


@pytest.mark.parametrize("swap, s_kv, hbm, want", [
    (False, 16384, None, 8), (False, 65536, None, 16), (False, 65536, 3352.0, 8),
    (False, 65536, 4915.0, 16), (False, 2048, 3352.0, 1),
    (True, 65536, 4915.0, 8), (True, 65536, 6000.0, 16), (True, 16384, 6000.0, 8)])
def test_default_splits_prefer_clusters_where_they_keep_up(swap, s_kv, hbm, want,
                                                           monkeypatch):
    """``num_splits=None`` on B1 H32 H_kv 8 decoding (132 SMs): 8 splits combined in clusters
    up to 16k keys, and past it where 64 CTAs saturate the memory, else the heuristic's 16; no
    split below 4k keys. The 64-row tile's CTAs saturate an H100's 3.35 TB/s, not an H200's
    4.9; the swap-AB decode tile's (``DECODE_SWAP_AB``) the H200's too."""
    from cute_kernels.ops.attention import default_splits
    from cute_kernels.tuning import attention as tuning

    monkeypatch.setattr(tuning, "DECODE_SWAP_AB", swap)
    assert default_splits(1, 32, 1, 128, 8, s_kv, False, 132, True, None, hbm) == want


def test_decode_route_takes_the_swap_ab_tile(monkeypatch):
    """Hopper tiles of at most ``DECODE_SWAP_AB_MAX_ROWS`` query rows run the swap-AB decode
    kernel on the next power-of-two rows (GQA packed: H / H_kv x S_q rows; unpacked causal:
    S_q), said by ``describe`` and in the kernel's configuration; not with more rows, on the
    Ampere path or with the switch off."""
    from cute_kernels.ops.attention import attention_route
    from cute_kernels.tuning import attention as tuning

    def route(s_q=1, h=32, h_kv=8, causal=False, hopper=True, splits=8):
        return attention_route(1, h, h_kv, s_q, 65536, 128, causal, splits, hopper, None)

    assert route().decode_rows == 8 and route(s_q=4).decode_rows == 16
    assert route(s_q=5, h=4, h_kv=4, causal=True).decode_rows == 8  # unpacked, causal
    cfg = route().hopper_config(128)
    assert cfg["decode_rows"] == 8 and cfg["cluster_splits"] == 8 and "block_m" not in cfg
    assert "swap-AB" in route().describe(128) and "through DSMEM" in route().describe(128)
    assert "cluster_splits" not in route(splits=1).hopper_config(128)
    assert route(s_q=8).decode_rows == 0  # 32 packed rows: the 64-row tile
    assert route(hopper=False).decode_rows == 0
    assert "swap-AB" not in route(hopper=False).describe(128, "ampere")
    monkeypatch.setattr(tuning, "DECODE_SWAP_AB", False)
    assert route().decode_rows == 0 and route().hopper_config(128)["block_m"] == 64


def test_num_splits_is_checked():
    import cute_kernels as ck

    q = torch.randn(1, 1, 8, 64).bfloat16()
    with pytest.raises(TypeError, match="num_splits"):
        ck.attention(q, q, q, num_splits=2.0)
    with pytest.raises(ValueError, match="num_splits"):
        ck.attention(q, q, q, num_splits=0)


@pytest.mark.parametrize("path, target", [("hopper", "sm_90a"), ("ampere", "sm_80")])
@pytest.mark.parametrize("head_dim, causal", [(64, False), (128, False), (128, True)])
def test_split_kv_kernel_ptx(path, target, head_dim, causal):
    """The split-KV builds: the dense kernels with SplitKeyBlocks; no spills but the dense
    builds' allowance (test_ptx.py)."""
    from test_ptx import _assert_no_spills, attention_spill_allowance  # tests/ is on the path

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build(path, torch.bfloat16, head_dim, causal, split_kv=True),
                      target)
    assert ("wgmma.mma_async" if path == "hopper" else "mma.sync.aligned") in ptx
    _assert_no_spills(ptx, target, allowed=attention_spill_allowance(path, head_dim, causal))


@pytest.mark.parametrize("s_q, causal", [(1, True), (1, False), (7, False)])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_packed_query_heads_are_the_same_attention(s_q, causal, layout):
    """GQA packing (decode): the H / H_kv query heads of a KV head as rows of one
    (B, H_kv, (H / H_kv) S_q, D) query, without GQA and non-causal, give the same o and lse
    (a view of a contiguous q, a copy of a (B, S, H, D)-stored one)."""
    from cute_kernels.ops.attention import packs_query_heads

    g = torch.Generator().manual_seed(s_q)
    b, h, h_kv, d, s_kv = 2, 8, 2, 64, 50
    q = torch.randn(b, h, s_q, d, generator=g).bfloat16()
    if layout == "bshd":
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    k = torch.randn(b, h_kv, s_kv, d, generator=g).bfloat16()
    v = torch.randn(b, h_kv, s_kv, d, generator=g).bfloat16()
    assert packs_query_heads(h, h_kv, s_q, causal)
    packed = q.reshape(b, h_kv, (h // h_kv) * s_q, d)
    o_packed, lse_packed = attention_reference(packed, k, v, causal=False)
    o, lse = attention_reference(q, k, v, causal=causal)
    torch.testing.assert_close(o_packed.view(b, h, s_q, d), o, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse_packed.view(b, h, s_q), lse, atol=1e-5, rtol=1e-5)


def test_packing_rule():
    from cute_kernels.ops.attention import packs_query_heads

    assert packs_query_heads(32, 8, 16, False) and packs_query_heads(32, 8, 1, True)
    assert not packs_query_heads(8, 8, 1, False)      # no GQA
    assert not packs_query_heads(32, 8, 128, False)   # a full tile per head already
    assert not packs_query_heads(32, 8, 8, True)      # causal rows would take the wrong diagonal


@pytest.mark.parametrize("h, h_kv, s_q, causal, short", [(32, 8, 1, False, True),
                                                         (32, 8, 16, False, True),
                                                         (32, 8, 17, False, False),
                                                         (4, 4, 64, True, True),
                                                         (4, 4, 65, False, False),
                                                         (32, 8, 8, True, True)])
def test_plans_take_the_64_row_tile_for_at_most_64_query_rows(monkeypatch, h, h_kv, s_q, causal,
                                                               short):
    """make_plan keys (and builds) the Hopper kernel's 64-row tile where a tile holds at most
    64 query rows after GQA packing (the swap-AB decode tile off, or too many rows for it);
    the Ampere path shares one kernel (a Hopper-only key)."""
    from cute_kernels.ops import attention as att
    from cute_kernels.tuning import attention as tuning

    seen = []
    monkeypatch.setattr(att, "kernel_for",
                        lambda device, key, make, hopper_key=(): seen.append(hopper_key))
    monkeypatch.setattr(att, "device_target", lambda device: ("hopper", "sm_90a"))
    q = torch.empty(2, h, s_q, 128, dtype=torch.bfloat16)
    # keys past PERSISTENT_MAX_KEYS: the one-CTA-per-tile launch's key where not short
    k = torch.empty(2, h_kv, att.PERSISTENT_MAX_KEYS + 808, 128, dtype=torch.bfloat16)
    rows = (h // h_kv if att.packs_query_heads(h, h_kv, s_q, causal) else 1) * s_q
    swap = rows <= tuning.DECODE_SWAP_AB_MAX_ROWS
    att.make_plan(q, k, causal, 0.1, 1)
    assert seen[-1] == ((("short_query", "decode", tuning.decode_rows(rows)) if swap
                         else ("short_query",)) if short else ())
    monkeypatch.setattr(tuning, "DECODE_SWAP_AB", False)
    att.make_plan(q, k, causal, 0.1, 1)
    assert seen[-1] == (("short_query",) if short else ())
    assert att.hopper_config(128, causal, short_query=True)["block_m"] == 64


@pytest.mark.parametrize("s_q, s_kv, causal, d, persistent", [(1000, 8192, False, 128, True),
                                                              (65, 300, False, 128, True),
                                                              (1000, 8193, False, 128, False),
                                                              (1000, 1000, True, 128, True),
                                                              (3000, 5000, True, 128, True),
                                                              (1000, 5000, False, 64, True),
                                                              (1000, 1000, True, 64, True),
                                                              (2048, 3000, False, 64, True),
                                                              (2048, 3000, True, 64, True),
                                                              (2047, 3000, False, 64, True),
                                                              (64, 1000, False, 128, False)])
def test_plans_run_short_keys_persistent(monkeypatch, s_q, s_kv, causal, d, persistent):
    """The Hopper kernel's persistent schedule (its own key, the CTAs' walks, one CTA per SM
    or two for 64-row tiles) for D = 64, and for D = 128 when causal or with at most
    PERSISTENT_MAX_KEYS keys; not for decoding's short query tiles (S_q <= 64). D = 64 with
    at least TALL_TILE_MIN_SEQ query rows and keys (causal with TALL_TURNS): 192-row tiles
    (``tall``), one CTA per SM."""
    from cute_kernels.ops import attention as att

    seen = []
    monkeypatch.setattr(att, "kernel_for",
                        lambda device, key, make, hopper_key=(): seen.append(hopper_key))
    monkeypatch.setattr(att, "device_target", lambda device: ("hopper", "sm_90a"))
    monkeypatch.setattr(att, "sm_count", lambda device: 132)
    q = torch.empty(2, 4, s_q, d, dtype=torch.bfloat16)
    k = torch.empty(2, 4, s_kv, d, dtype=torch.bfloat16)
    plan = att.make_plan(q, k, causal, 0.1, 1)
    assert ("persistent" in seen[0]) == persistent
    assert (plan.order is not None) == persistent
    tall = d == 64 and (att.TALL_TURNS or not causal) and min(s_q, s_kv) >= att.TALL_TILE_MIN_SEQ
    assert ("tall" in seen[0]) == tall
    if persistent:
        two = d == 64 and not tall  # 64-row tiles, two CTAs per SM
        tiles = 2 * 4 * -(-s_q // (64 if two else 192 if tall else 128))
        assert plan.ctas == min(tiles, 132 * (2 if two else 1))
        walks = plan.order.tolist()  # CSR: the CTAs' offsets, then the tiles
        assert walks[0] == plan.ctas + 1 and walks[plan.ctas] == len(walks)
        assert sorted(walks[plan.ctas + 1:]) == list(range(tiles))
