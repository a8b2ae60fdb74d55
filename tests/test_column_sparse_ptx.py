"""The Ampere column-sparse attention kernel (``AttentionSm80(..., gather=True)``) compiles for
sm_80 and sm_90a (the Ampere path forced on Hopper) without a GPU: its instructions, its
gathered loads counted against the dense kernel's, no local memory, no spills; and its
compile-time rules."""

import functools
import re

import pytest

from cute_kernels.registry import instruction_mix

AMPERE = {"mma.sync", "cp.async", "ldmatrix"}
GROUPS = (64, 128, 192)


def gather_build(head_dim: int, gather: bool = True, **config):
    """A ``Build`` of ``AttentionSm80(head_dim, gather=gather, **config)`` against symbolic bf16
    (B, H, S, D) tensors (unit-stride head dim, other strides multiples of 8 elements), a
    compact fp32 lse and, gathering, compact int32 indices (B, H, G, L) and counts
    (B, H, G)."""
    import cutlass
    import torch

    from cute_kernels.kernels.attention.sm80 import AttentionSm80
    from cute_kernels.runtime.bridge import fake_bhsd, fake_compact
    from cute_kernels.runtime.compile import Build
    from cute_kernels.runtime.launch import launch_args

    def bhsd():
        return fake_bhsd(torch.bfloat16, head_dim)

    kernel = AttentionSm80(head_dim, gather=gather, **config)
    return Build(kernel, launch_args(
        kernel, mQ=bhsd(), mK=bhsd(), mV=bhsd(), mO=bhsd(), mLSE=fake_compact(torch.float32, 3),
        mPrevLSE=None, mColsum=None,
        mIndices=fake_compact(torch.int32, 4) if gather else None,
        mCounts=fake_compact(torch.int32, 3) if gather else None, scale=cutlass.Float32(1.0),
        out_scale=None))


@functools.cache
def _ptx(head_dim: int, target: str, gather: bool, config: tuple) -> str:
    from cute_kernels.runtime.compile import compile_ptx

    return compile_ptx(gather_build(head_dim, gather, **dict(config)), target)


def _assert_no_spills(ptx: str, target: str) -> None:
    from test_ptx import _assert_no_spills as no_spills  # tests/ is on pytest's path

    no_spills(ptx, target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gather_ptx(head_dim, group, target):
    """Default tile per group: mma.sync / cp.async / ldmatrix; every cp.async a zero-filling
    16-byte copy (src-size operand), as many as the dense kernel of the same tile issues (Q
    once, K at two sites, V at one; one per 16-byte vector a thread owns); one count load and
    one index load per owned row at each of the two index sites; no local memory, no spills."""
    from cute_kernels.kernels.attention.sm80 import AttentionSm80

    kernel = AttentionSm80(head_dim, gather=True, group=group)
    assert kernel.block_m == (128 if group % 128 == 0 else 64)
    assert kernel.warps == kernel.block_m // 16
    ptx = _ptx(head_dim, target, True, (("group", group),))
    assert f".target {target}" in ptx
    assert f".reqntid {kernel.threads}, 1, 1" in ptx
    mix = instruction_mix(ptx)
    assert all(mix[f] > 0 for f in AMPERE), mix
    assert "ld.local" not in ptx and "st.local" not in ptx

    per_vec_row = head_dim * 2 // 16  # 16-byte vectors per row
    rows_per_pass = kernel.threads // per_vec_row
    q_vecs, kv_vecs = kernel.block_m // rows_per_pass, kernel.block_n // rows_per_pass
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16, %r\d+;", ptx)
    assert len(copies) == ptx.count("cp.async.cg.shared.global") == q_vecs + 3 * kv_vecs
    dense = _ptx(head_dim, target, False, (("block_m", kernel.block_m),
                                           ("warps", kernel.warps)))
    assert len(copies) == dense.count("cp.async.cg.shared.global")
    assert len(re.findall(r"ld\.global\.[bsu]32", ptx)) == 1 + 2 * kv_vecs
    assert "ld.global" not in dense
    _assert_no_spills(ptx, target)


def test_gather_192_row_tile_ptx():
    """The 192-row option (a whole group per CTA, 12 warps, block_n 96: the copy's 48 rows per
    pass tile it) builds without spills at D = 64."""
    ptx = _ptx(64, "sm_80", True, (("block_m", 192), ("block_n", 96), ("group", 192)))
    assert ".reqntid 384, 1, 1" in ptx
    assert all(instruction_mix(ptx)[f] > 0 for f in AMPERE)
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, "sm_80")


def test_dense_defaults_unchanged():
    from cute_kernels.kernels.attention.sm80 import AttentionSm80

    for d, warps in ((64, 4), (128, 8)):
        for causal in (False, True):
            kernel = AttentionSm80(d, causal)
            assert (kernel.block_m, kernel.block_n, kernel.warps) == (128, 64, warps)
            assert not kernel.gather


@pytest.mark.parametrize("kwargs, match", [
    (dict(gather=True, causal=True), "non-causal"),
    (dict(gather=True, colsum=True), "no column sums"),
    (dict(gather=True, group=192, block_m=128), r"block_m \(128\) must divide group \(192\)"),
    (dict(gather=True, group=96), r"block_m \(64\) must divide group \(96\)"),
    (dict(gather=True, group=0), "must divide group"),
    (dict(gather=True, group=128, block_m=128, warps=3), "multiple of 16 x warps"),
    (dict(gather=True, group=192, block_m=192), "rows 384 threads copy per pass"),
    (dict(gather=True, group=128, block_n=40), "block_n"),
])
def test_gather_config_errors(kwargs, match):
    from cute_kernels.kernels.attention.sm80 import AttentionSm80

    with pytest.raises(ValueError, match=match):
        AttentionSm80(64, **kwargs)


def test_packed_key_rows_group_of():
    from cute_kernels.kernels.attention.block_info import DenseKeyBlocks, PackedKeyRows

    policy = PackedKeyRows((64, 64), 192)
    assert isinstance(policy, DenseKeyBlocks) and not policy.causal
    assert [policy.group_of(m) for m in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert PackedKeyRows((128, 64), 128).group_of(3) == 3


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("words", [True, False])
@pytest.mark.parametrize("kind", ["lists", "counts"])
def test_column_lists_kernel_ptx(kind, words, target):
    """The column-list kernels (kernels/column_lists.py), warp per row: ``prefetch`` chunk
    loads per batch (32-bit words, or four bytes each), popc and shuffles; the lists kernel
    loads the next batch ahead (a second batch of loads plus the row's count), stages each
    chunk through shared memory (selected, then unselected: two compactions per chunk) and
    stores int32; the counts kernel ends in one ``red.max``; no local memory or spills."""
    from cute_kernels.kernels.column_lists import CHUNK_WORDS
    from cute_kernels.ops.column_lists import make_build as lists_build
    from cute_kernels.runtime.compile import compile_ptx

    build = lists_build(kind, words)
    prefetch = build.fn.prefetch
    ptx = compile_ptx(build, target)
    loads = prefetch * (1 if words else 4) * (2 if kind == "lists" else 1)
    assert ptx.count("ld.global.b32") == loads * words + (kind == "lists")
    assert ptx.count("ld.global.b8") == loads * (not words)
    assert "popc.b32" in ptx
    if kind == "lists":
        compactions = 2 * prefetch
        assert ptx.count("shfl.sync.up") == 5 * compactions
        assert ptx.count("st.shared.b32") == ptx.count("ld.shared.b32") == compactions
        assert ptx.count("st.global.b32") == compactions
    else:
        assert ptx.count("shfl.sync.bfly") == 5  # the row's count, summed over lanes
        # one reduction without return per row (no warp waits on the shared maximum)
        assert ptx.count("red.relaxed.gpu.global.max.s32") == 1 and "atom.global" not in ptx
        assert ptx.count("st.global.b32") == 2
    assert CHUNK_WORDS == 32  # one word per lane: the loads are 128-byte lines
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, target)


def test_column_lists_rejects_bad_input():
    import torch

    from cute_kernels.ops.column_lists import column_counts, column_lists

    packed = torch.zeros(2, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="multiple_of"):
        column_counts(packed, 32, 0)
    with pytest.raises(TypeError, match="packed"):
        column_counts(packed.float(), 32)
    with pytest.raises(ValueError, match="CUDA"):
        column_counts(packed, 32)
    counts = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"ceil\(n / 8\)"):
        column_lists(packed, counts, 40, 8)
    with pytest.raises(ValueError, match="width"):
        column_lists(packed, counts, 32, 33)
    with pytest.raises(TypeError, match="counts"):
        column_lists(packed, counts.long(), 32, 8)
    with pytest.raises(ValueError, match="CUDA"):
        column_lists(packed, counts, 32, 8)


def test_gather_tile_order():
    """The gather grid's tile order: a permutation of the (M, H, B) tiles, longest list
    first, equal lists in grid order; with 64-row tiles of a 192-row group three tiles share
    each count."""
    import torch

    from cute_kernels.ops.column_sparse import gather_tile_order

    counts = torch.tensor([[[5, 9, 1], [9, 0, 7]]], dtype=torch.int32)  # (B 1, H 2, G 3)
    order = gather_tile_order(counts, 3 * 192, 192, 192)
    assert order.dtype == torch.int32
    assert order.tolist() == [1, 3, 5, 0, 2, 4]  # tile (h * 3 + g): 9, 9, 7, 5, 1, 0
    thirds = gather_tile_order(counts, 3 * 192, 64, 192)  # M = 9 tiles per head
    assert sorted(thirds.tolist()) == list(range(18))
    assert thirds[:6].tolist() == [3, 4, 5, 9, 10, 11]  # group 1 of head 0, group 0 of head 1
    halves = gather_tile_order(torch.tensor([[[4, 6]]], dtype=torch.int32), 200, 64, 128)
    assert halves.tolist() == [2, 3, 0, 1]  # two 64-row tiles per 128-row group
    # S_q = 2 x 192 + 5: 7 tiles of 64 rows (the grid's M), not 9 = the groups' rows / 64
    short = gather_tile_order(torch.tensor([[[1, 2, 3]]], dtype=torch.int32), 389, 64, 192)
    assert short.tolist() == [6, 3, 4, 5, 0, 1, 2]


@pytest.mark.parametrize("b, h, m", [(1, 3, 300), (2, 5, 64), (3, 7, 5), (1, 1, 1)])
def test_longest_first_order_keeps_heads_together(b, h, m):
    """ops/tile_order.py: a permutation; chunks of whole heads (about 128 tiles, at least one
    head) in grid order; inside a chunk the work never grows along the order, ties in grid
    order; equal work is the identity."""
    import torch

    from cute_kernels.kernels.attention.tiles import LONGEST_FIRST_CHUNK_TILES
    from cute_kernels.ops.tile_order import longest_first_order

    work = torch.randint(0, 50, (b, h, m), generator=torch.Generator().manual_seed(b * h * m))
    order = longest_first_order(work)
    assert order.dtype == torch.int32 and sorted(order.tolist()) == list(range(b * h * m))
    order = order.long()
    chunk = max(1, LONGEST_FIRST_CHUNK_TILES // m) * m
    flat = work.reshape(-1)
    for start in range(0, b * h * m, chunk):
        part = order[start:start + chunk]
        assert int(part.min()) >= start and int(part.max()) < start + chunk
        w = flat[part]
        assert bool((w[1:] <= w[:-1]).all())
        ties = w[1:] == w[:-1]
        assert bool((part[1:][ties] > part[:-1][ties]).all())
    assert longest_first_order(torch.ones(b, h, m, dtype=torch.int32)).tolist() == list(
        range(b * h * m))


@pytest.mark.parametrize("path, target", [("hopper", "sm_90a"), ("ampere", "sm_80")])
def test_ordered_gather_grid_ptx(path, target):
    """``tile_order``: the CTA reads its tile from the order (one more global load and the
    grid's size) and is otherwise the same kernel; only gather kernels take it."""
    import torch

    from cute_kernels.kernels.attention.sm80 import AttentionSm80
    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.ops.column_sparse import make_build
    from cute_kernels.runtime.compile import compile_ptx

    plain = compile_ptx(make_build(path, torch.bfloat16, 128, 192, False), target)
    ordered = compile_ptx(make_build(path, torch.bfloat16, 128, 192, False, ordered=True),
                          target)
    assert ordered.count("ld.global") == plain.count("ld.global") + 1
    assert "%nctaid.x" in ordered and "%nctaid.x" not in plain
    with pytest.raises(ValueError, match="tile_order"):
        AttentionSm90(128, False, tile_order=True)
    with pytest.raises(ValueError, match="tile_order"):
        AttentionSm80(128, tile_order=True)
    with pytest.raises(ValueError, match="tile_order"):
        AttentionSm90(128, False, block_sparse=True, tile_order=True)
