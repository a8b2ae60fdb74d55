import itertools

import pytest
import torch

from cute_kernels.kernels.common.tile_scheduler import (
    balanced_walks,
    grouped_tile_coord,
    persistent_grid,
)


@pytest.mark.parametrize("tiles_m, tiles_n, group_m, batches",
                         [(1, 1, 8, 1), (7, 5, 8, 2), (16, 16, 8, 1), (9, 3, 4, 3), (3, 40, 2, 1)])
def test_grouped_order_is_a_permutation(tiles_m, tiles_n, group_m, batches):
    coords = [grouped_tile_coord(t, tiles_m, tiles_n, group_m)
              for t in range(tiles_m * tiles_n * batches)]
    expect = set(itertools.product(range(tiles_m), range(tiles_n), range(batches)))
    assert set(coords) == expect and len(coords) == len(expect)


def test_grouped_order_walks_rows_within_a_group():
    # 16 x 16 tiles, groups of 8 rows: the first 8 tiles are rows 0..7 of column 0.
    first = [grouped_tile_coord(t, 16, 16, 8)[:2] for t in range(10)]
    assert first[:8] == [(m, 0) for m in range(8)] and first[8] == (0, 1)
    # a wave of 132 tiles touches 8 row panels and 17 column panels (vs 1 x 132 row-major)
    wave = [grouped_tile_coord(t, 64, 64, 8)[:2] for t in range(132)]
    assert len({m for m, _ in wave}) == 8 and len({n for _, n in wave}) == 17


def test_persistent_grid():
    assert persistent_grid(1000, 132) == 132
    assert persistent_grid(10, 132) == 10
    assert persistent_grid(0, 132) == 1
    assert persistent_grid(1000, 132, cluster_size=2) == 132
    assert persistent_grid(3, 132, cluster_size=2) == 4


def test_wave_efficiency_and_tile_choice():
    from cute_kernels.kernels.common.tile_scheduler import cluster_tiles
    from cute_kernels.tuning.gemm import (
        DEFAULT_TILE,
        TILE_SPEEDS,
        pick_tile,
        schedule,
        wave_efficiency,
    )

    assert wave_efficiency(448, 66) == pytest.approx(448 / 462) and wave_efficiency(132, 66) == 1
    # 1024 x 14336: 4 cluster-rows x 56 tiles of 128x256 = 224 units on 66 clusters, 3.4
    # waves; 128x176 (pingpong) makes 328 units, 4.97 waves, and wins
    assert cluster_tiles(1024, 14336, 1, DEFAULT_TILE, 2) == 224
    assert pick_tile(1024, 14336, 1, 132, TILE_SPEEDS, 2) == (128, 176, 64)
    assert pick_tile(512, 28672, 1, 132, TILE_SPEEDS, 2) == (128, 176, 64)
    assert pick_tile(3000, 5000, 1, 132, TILE_SPEEDS, 2) == (128, 192, 64)
    # 1024^3: 32 cluster tiles of 128x128 on 66 cluster slots; 64x128 (8 stages) makes 64,
    # as many as 128x64 and faster
    assert pick_tile(1024, 1024, 1, 132, TILE_SPEEDS, 2) == (64, 128, 64)
    assert schedule(1024, 1024, 1024, 1, 132).max_stages == 8
    # 128x128 streams 6 stages only where each tile's K is long (cuBLAS's kernel at 512 x 4096
    # x 14336); short loops keep the default depth
    long_k, short_k = schedule(512, 4096, 14336, 1, 132), schedule(2048, 1024, 2048, 1, 132)
    assert (long_k.tile, long_k.max_stages) == ((128, 128, 64), 6)
    assert (short_k.tile, short_k.max_stages) == ((128, 128, 64), None)
    assert schedule(128, 14336, 4096, 1, 132).max_stages is None
    # full waves keep the big tile
    for m, n in ((4096, 4096), (1024, 28672), (2048, 2048)):
        assert pick_tile(m, n, 1, 132, TILE_SPEEDS, 2) == DEFAULT_TILE, (m, n)


def test_pingpong_schedules():
    """128x176 tiles run pingpong consumers where their whole waves win (N 14336: 82 tile
    columns), never where the drift limiter runs (8192^3 keeps 128x256), never split
    through the fp32 workspace or shared by stream-K, and never for the gated GEMM."""
    from cute_kernels.tuning.gemm import PINGPONG_TILES, schedule

    assert PINGPONG_TILES == {(128, 176, 64)}
    for m, n, k in ((1024, 14336, 4096), (2048, 14336, 4096), (4096, 14336, 4096),
                    (512, 28672, 8192)):
        s = schedule(m, n, k, 1, 132)
        assert (s.tile, s.cluster_m, s.pingpong, s.stream_k) == ((128, 176, 64), 2, True,
                                                                 False), (m, n, k, s)
        assert "pingpong consumers" in s.describe()
    square = schedule(8192, 8192, 8192, 1, 132)
    assert (square.tile, square.drift, square.pingpong) == ((128, 256, 64), True, False)
    for m, n, k in ((4096, 4096, 4096), (3000, 5000, 3072), (1024, 1024, 1024),
                    (13, 14336, 4096), (64, 14336, 4096), (128, 4096, 14336),
                    (65536, 14336, 4096)):
        assert not schedule(m, n, k, 1, 132).pingpong, (m, n, k)
    for m in (1, 64, 1024):
        assert not schedule(m, 14336, 4096, 1, 132, skinny=False, gated=True).pingpong
    # every schedule of a wide sweep: pingpong only on its tiles, never with stream-K or
    # K slices
    for m in (1, 13, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for n in (1024, 4096, 5000, 14336, 28672, 53248):
            for k in (1024, 4096, 14336):
                s = schedule(m, n, k, 1, 132)
                if s.pingpong:
                    assert s.tile in PINGPONG_TILES and not s.stream_k and not s.skinny
                    assert s.cluster_k == 1, (m, n, k, s)


def test_skinny_schedules():
    """Decode-sized M is swapped into a 16-64 column tile and split along K until the SMs
    are busy; every shape of the big Llama sweep keeps its one-tile-per-unit schedule."""
    from cute_kernels.tuning.gemm import (
        SWAP_HALF_STAGES,
        SWAP_MAX_M,
        SWAP_MAX_STAGES,
        SWAP_UNSPLIT_MAX_BYTES,
        schedule,
        split_options,
    )

    for m in (1, 8, 13, 32):
        for n, k in ((14336, 4096), (4096, 14336), (28672, 8192)):
            s = schedule(m, n, k, 1, 132)
            assert s.swap and s.cluster_m == 1, (m, n, k, s)
            assert s.tile[1] >= m and s.tile[1] in (16, 32)
            assert k % (8 * s.splits) == 0
    # 33-64 tokens: unswapped 64-row tiles (one consumer warpgroup), split when few tiles
    assert not schedule(64, 28672, 8192, 1, 132).skinny
    assert schedule(64, 28672, 8192, 1, 132).tile == (64, 128, 64)
    assert schedule(48, 14336, 4096, 1, 132).tile[0] == 64
    assert schedule(64, 4096, 14336, 1, 132).cluster_k == 2  # 32 tiles: K halves paired
    assert schedule(65, 4096, 4096, 1, 132).tile[0] == 128
    # gated, decoding: 64-row tiles 128 deep, one CTA per tile up to the SMs, unclustered
    gated = schedule(64, 14336, 4096, 1, 132, skinny=False, gated=True)
    assert (gated.tile, gated.ctas, gated.cluster_m, gated.max_stages) == ((64, 128, 128), 112,
                                                                           1, 6)
    assert schedule(1, 28672, 4096, 1, 132, skinny=False, gated=True).ctas == 132
    assert schedule(65, 14336, 4096, 1, 132, skinny=False, gated=True).tile[0] == 128
    # a batched plain GEMM of few rows keeps the 128-row tiles
    assert schedule(64, 14336, 4096, 1, 132, skinny=False).tile[0] == 128
    # 32 tiles of 128 rows of a 4096-row weight: 64 tiles of 64 rows instead, unsplit (64
    # CTAs stream it at HBM speed, and C^T goes straight into the output)
    assert schedule(1, 4096, 14336, 1, 132).splits == 1
    assert schedule(1, 4096, 14336, 1, 132).tile == (64, 16, 128)
    assert schedule(1, 4096, 14336, 1, 132).ctas == 64
    # their smaller stages: 8 in flight (SWAP_HALF_STAGES), the 128-row swapped tiles 6
    assert schedule(1, 4096, 14336, 1, 132).max_stages == SWAP_HALF_STAGES == 8
    assert schedule(13, 14336, 4096, 1, 132).max_stages == SWAP_MAX_STAGES == 6
    # 1024 rows: 16 tiles of 64 rows, still too few: split 4 ways where K is long
    assert schedule(7, 1024, 14336, 1, 132).splits == 4
    # through the workspace, not stored into out (only unsplit swapped launches are)
    assert "C^T stored" not in schedule(7, 1024, 14336, 1, 132).describe()
    # a CTA streaming at most SWAP_UNSPLIT_MAX_BYTES of the weight runs unsplit (K <= 8192)
    assert SWAP_UNSPLIT_MAX_BYTES == 64 * 8192 * 2
    for m, n, k in ((7, 1024, 4096), (13, 2048, 2048), (1, 2048, 8192), (8, 512, 4096)):
        assert schedule(m, n, k, 1, 132).splits == 1, (m, n, k)
    assert schedule(1, 2048, 8200, 1, 132).splits > 1
    assert "C^T stored" in schedule(1, 4096, 14336, 1, 132).describe()
    assert schedule(13, 14336, 4096, 1, 132).splits == 1  # 112 tiles: no split
    # M = 128 x 4096 x 14336: 32 tiles of 128 x 128; 64 of 128 x 64, K halves paired in
    # clusters (through the workspace, 4 slices of 128 x 128, without cluster splits)
    assert schedule(128, 4096, 14336, 1, 132).cluster_k == 2
    assert schedule(128, 4096, 14336, 1, 132, cluster_split=False).splits == 4
    assert not schedule(128, 4096, 14336, 1, 132).swap
    # a split whose partials would cost a third of the operands' traffic is not taken
    assert not schedule(128, 28672, 8192, 1, 132).skinny
    for m, n, k in [(t, i, h) for h, i in ((4096, 14336), (8192, 28672), (16384, 53248))
                    for t in (1024, 4096, 16384, 65536)] + [(s, s, s) for s in (2048, 4096, 8192)]:
        assert not schedule(m, n, k, 1, 132).skinny, (m, n, k)
    # batched and "not skinny" (the gated GEMM) never swap or split
    assert not schedule(8, 4096, 14336, 2, 132).skinny
    assert not schedule(8, 4096, 14336, 1, 132, skinny=False).skinny
    assert schedule(SWAP_MAX_M + 1, 4096, 4096, 1, 132).swap is False
    # slices: equal, 16-byte multiples, at least SPLIT_MIN_K long
    assert split_options(1000) == [1]
    assert split_options(4096)[:4] == [1, 2, 4, 8] and 3 not in split_options(4096)
    assert 7 in split_options(14336)


def _as_view(t: torch.Tensor, shape, stride) -> torch.Tensor:
    return t.as_strided(tuple(shape), tuple(stride))


def test_k_slices_sum_to_the_product():
    """The split-K operand views (``split_k.k_slices``, the layouts the kernel builds at trace
    time): slice s of both operands multiplies to the partial over K slice s, in any major,
    and the partials sum to the full product."""
    from cute_kernels.kernels.gemm.split_k import k_slices

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(13, 96, generator=gen, dtype=torch.float64)
    b = torch.randn(40, 96, generator=gen, dtype=torch.float64).t().contiguous().t()  # N-major
    for splits in (1, 2, 3, 4):
        va, vb = (_as_view(t, *k_slices(t.shape, t.stride(), splits)) for t in (a, b))
        assert va.shape == (13, 96 // splits, splits)
        assert va.data_ptr() == a.data_ptr() and vb.data_ptr() == b.data_ptr()  # views
        parts = torch.einsum("mks,nks->mns", va, vb)
        torch.testing.assert_close(parts.sum(-1), a @ b.t())
        ks, last = 96 // splits, splits - 1
        torch.testing.assert_close(parts[..., last], a[:, ks * last:] @ b[:, ks * last:].t())
    with pytest.raises(ValueError, match="divisible by 8"):  # 96 / 5 slices: not 8-aligned
        k_slices(a.shape, a.stride(), 5)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("n", [40, 37])
def test_workspace_views_compute_the_product(swap, n):
    """The workspace views of a split launch (``split_k.workspace_views``), played out in
    torch on a workspace of ``ops.gemm.workspace_words``: slice s of the kernel's A and B
    views multiplied into slice s of its C view, then the reduce's (M, N, splits) view summed
    over slices, is a @ b^T (swapped: C is C^T, column-major), and nothing lands in the
    padding columns of an N that is not a multiple of 8 or past the workspace's end."""
    from cute_kernels.kernels.gemm.split_k import k_slices, workspace_views
    from cute_kernels.ops.gemm import workspace_words

    gen = torch.Generator().manual_seed(1)
    a = torch.randn(13, 96, generator=gen, dtype=torch.float64)
    b = torch.randn(n, 96, generator=gen, dtype=torch.float64)
    splits = 3
    words = workspace_words(13, n, splits)
    buf = torch.full((words + 8,), float("nan"), dtype=torch.float64)
    gemm_c, reduce_c = workspace_views(13, n, splits, swap)
    lhs, rhs = (b, a) if swap else (a, b)
    va, vb = (_as_view(t, *k_slices(t.shape, t.stride(), splits)) for t in (lhs, rhs))
    c = _as_view(buf, *gemm_c)
    for s in range(splits):
        c[..., s] = va[..., s] @ vb[..., s].t()
    torch.testing.assert_close(_as_view(buf, *reduce_c).sum(-1), a @ b.t())
    assert int(torch.isfinite(buf).sum()) == splits * 13 * n  # each output word once
    assert torch.isnan(buf[words:]).all()


@pytest.mark.parametrize("n_m, n_h, n_b", [(8, 16, 8), (3, 5, 7), (33, 2, 3), (1, 4, 4),
                                           (200, 3, 1), (128, 1, 1), (129, 2, 2)])
def test_longest_first_walk_is_a_permutation_longest_first_per_chunk(n_m, n_h, n_b):
    """The causal attention grid's ``longest_first`` walk: every (m, h, b) tile exactly once,
    and inside each chunk of heads the query tiles never get longer along the launch order."""
    from cute_kernels.kernels.attention.sm90 import (
        LONGEST_FIRST_CHUNK_TILES,
        longest_first_coords,
    )

    walk = [longest_first_coords(r, n_m, n_h, n_b) for r in range(n_m * n_h * n_b)]
    assert sorted(walk) == sorted(itertools.product(range(n_m), range(n_h), range(n_b)))
    chunk = max(LONGEST_FIRST_CHUNK_TILES // n_m, 1) * n_m
    for start in range(0, len(walk), chunk):
        ms = [m for m, _, _ in walk[start:start + chunk]]
        assert ms == sorted(ms, reverse=True)
        assert ms[0] == n_m - 1


def test_balanced_walks_deal_each_tile_once_to_the_earliest_free_cta():
    """CSR form (offsets, then tile ids); every tile once; each tile goes to the CTA whose
    list ends first, so the lists' costs end within one tile of each other when dealt
    longest first."""
    import random

    rng = random.Random(0)
    tiles = list(range(500))
    rng.shuffle(tiles)
    costs = sorted((rng.randint(1, 20) for _ in tiles), reverse=True)
    walks = balanced_walks(tiles, costs, 37)
    assert walks[0] == 38 and walks[37] == len(walks) == 38 + 500
    cost_of = dict(zip(tiles, costs, strict=True))
    assert sorted(walks[38:]) == list(range(500))
    loads = [sum(cost_of[t] for t in walks[walks[c]:walks[c + 1]]) for c in range(37)]
    assert max(loads) - min(loads) <= max(costs)
    # a CTA's list keeps the deal order (the operand-sharing groups run together)
    position = {t: i for i, t in enumerate(tiles)}
    for c in range(37):
        walk = walks[walks[c]:walks[c + 1]]
        assert walk == sorted(walk, key=position.get)
    # equal costs: round robin; fewer tiles than CTAs: one CTA per tile
    assert balanced_walks([5, 6, 7, 8], [1] * 4, 2) == [3, 5, 7, 5, 7, 6, 8]
    assert balanced_walks([9, 4], [3, 1], 8) == [3, 4, 5, 9, 4]


def test_lpt_walks_of_a_gather_grid():
    """``tile_order.lpt_walks`` (block-sparse's packed lists, dealt on the host once per
    mask): the longest-first order of uneven per-tile work dealt by ``balanced_walks``, each
    tile costing its work plus the fixed part; every tile once, loads within one tile."""
    from cute_kernels.ops.tile_order import longest_first_order, lpt_walks

    gen = torch.Generator().manual_seed(0)
    work = torch.randint(0, 13, (2, 16, 64), generator=gen, dtype=torch.int32)
    order = longest_first_order(work)
    walks = lpt_walks(order, work, 264, 2)
    assert walks.dtype == torch.int32 and walks.device.type == "cpu"
    w = walks.tolist()
    assert w[0] == 265 and w[264] == len(w) == 265 + work.numel()
    assert sorted(w[265:]) == list(range(work.numel()))
    flat = work.reshape(-1).tolist()
    loads = [sum(flat[t] + 2 for t in w[w[c]:w[c + 1]]) for c in range(264)]
    assert max(loads) - min(loads) <= max(flat) + 2
    assert walks.tolist() == balanced_walks(order.tolist(),
                                            [flat[t] + 2 for t in order.tolist()], 264)


def test_cluster_split_schedules():
    """Long K with too few tiles to fill the SMs: two CTAs per tile in a cluster, the K
    halves summed in the launch (one wave, 70-100% of the SMs; 64 CTAs for 64-row tiles),
    the tile of best speed x fill; short K, fewer tiles (the workspace's slices), more
    tiles, batched, gated or fp32-out problems do not."""
    from cute_kernels.tuning.gemm import schedule

    for m, n, k, tile, ctas, stages in (
            (1024, 1024, 4096, (128, 128, 64), 128, None),
            (768, 1024, 8192, (128, 128, 64), 96, None),
            (512, 2048, 8192, (128, 128, 64), 128, None),
            (1024, 1536, 8192, (128, 192, 64), 128, None),
            (128, 4096, 14336, (128, 64, 64), 128, 8),
            (64, 4096, 14336, (64, 128, 64), 64, 8)):  # 64-row tiles: 64 CTAs stream it
        s = schedule(m, n, k, 1, 132)
        assert (s.cluster_k, s.cluster_m, s.splits, s.tile, s.ctas, s.max_stages) == (
            2, 1, 1, tile, ctas, stages), (m, n, k, s)
        assert not s.skinny and "split-K 2 in the cluster" in s.describe()
        assert schedule(m, n, k, 1, 132, cluster_split=False).cluster_k == 1
        assert schedule(m, n, k, 2, 132).cluster_k == 1  # batched
        assert schedule(m, n, k, 1, 132, skinny=False).cluster_k == 1  # gated
    assert schedule(1024, 1024, 1024, 1, 132).cluster_k == 1  # K too short
    assert schedule(2048, 2048, 4096, 1, 132).cluster_k == 1  # enough tiles unsplit
    assert schedule(128, 14336, 4096, 1, 132).cluster_k == 1
    assert schedule(64, 2048, 8192, 1, 132).splits == 8  # 16 tiles: the workspace's split


@pytest.mark.parametrize("clusters", [2, 3, 7, 33, 66])
@pytest.mark.parametrize("k_tiles", [1, 2, 3, 16, 48])
def test_stream_k_ranges_cover_each_shared_tile_once(clusters, k_tiles):
    """Stream-K: the last ``rem + clusters`` tiles' k-iterations (every tile's when they are
    fewer than two waves) are cut into one range per cluster; every k-tile of every shared
    tile is run exactly once, every cluster runs something, and a tile split between
    clusters goes to consecutive ones: the first ``write``s its partial, ``middle`` ones
    leave theirs too, and the ``last`` adds every one, from the tile's first cluster
    (``stream_k_first_cluster``) on, and stores the tile."""
    from cute_kernels.kernels.common.tile_scheduler import (
        stream_k_first_cluster,
        stream_k_fits,
        stream_k_range,
        stream_k_tiles,
    )

    for tiles in range(1, 5 * clusters):
        shared = stream_k_tiles(tiles, clusters, k_tiles)
        if stream_k_fits(tiles, clusters):
            assert shared == tiles % clusters + clusters
            assert (tiles - shared) % clusters == 0  # whole waves before the shared tiles
        elif tiles % clusters == 0 or tiles * k_tiles < clusters:
            assert shared == 0
        else:
            assert shared == tiles  # fewer than two waves: every tile shared
        if not shared:  # no units at all: every cluster walks whole tiles only
            for c in range(clusters):
                write, _, _, full, _, middle, last, _, _ = stream_k_range(c, clusters, 0,
                                                                          k_tiles)
                assert (write, full, middle, last) == (0, 0, 0, 0)
            continue
        parts = {}
        for c in range(clusters):
            write, t_last, x, full, first_full, middle, last, t_first, y = stream_k_range(
                c, clusters, shared, k_tiles)
            units = ([(t_last, 0, x, "write")] * write
                     + [(first_full + j, 0, k_tiles, "full") for j in range(full)]
                     + [(t_first, y, x, "middle")] * middle
                     + [(t_first, y, k_tiles, "last")] * last)
            assert units and not (middle and (write or full or last)), (tiles, c)
            for tile, begin, end, kind in units:
                assert 0 <= begin < end <= k_tiles
                parts.setdefault(tile, []).append((begin, end, kind, c))
        assert sorted(parts) == list(range(shared))
        for tile, got in parts.items():
            got.sort()
            assert got[0][0] == 0 and got[-1][1] == k_tiles, (tile, got)
            for (_, end, _, c0), (begin, _, _, c1) in zip(got, got[1:]):
                assert (begin, c1) == (end, c0 + 1), (tile, got)
            kinds = [kind for _, _, kind, _ in got]
            assert kinds == ["full"] or (kinds[0], kinds[-1]) == ("write", "last") and set(
                kinds[1:-1]) <= {"middle"}, (tile, kinds)
            if stream_k_fits(tiles, clusters):
                assert len(kinds) <= 2  # ranges of at least a tile
            # the tile's last waits on exactly the clusters before it that hold a part
            assert stream_k_first_cluster(tile, clusters, shared, k_tiles) == got[0][3]


def test_stream_k_schedule():
    """The scheduler takes stream-K where the last wave would idle more than the shared tiles
    cost (``stream_k_score``), in place of the drift limiter only where it gains
    ``STREAM_K_OVER_DRIFT`` more, never for the gated GEMM, and keeps whole waves as they
    are."""
    from cute_kernels.tuning.gemm import schedule, stream_k_score

    # 4000 x 11008 on 128 x 256: 688 cluster tiles on 66 clusters (10.4 waves, 95% busy);
    # stream-K shares the last 94 of them
    sk = schedule(4000, 11008, 4096, 1, 132)
    assert sk.stream_k and sk.tile == (128, 256, 64) and sk.ctas == 132
    assert "stream-K" in sk.describe()
    assert stream_k_score(688, 66, 1.0) > 688 / 726
    assert schedule(6144, 12288, 4096, 1, 132).stream_k
    assert not schedule(4000, 11008, 4096, 1, 132, skinny=False).stream_k  # gated GEMM
    # half the tiles shared (4096^3: 124 of 256) or all of them (512 x 14336): slower
    assert stream_k_score(256, 66, 1.0) < 256 / 264
    for m, n, k in ((4096, 4096, 4096), (512, 14336, 4096), (3000, 5000, 3072)):
        assert not schedule(m, n, k, 1, 132).stream_k, (m, n, k)
    # the drift limiter's launches: 4096 x 28672 x 8192 (28 waves, 10 of 66 clusters busy in
    # the last) takes stream-K (+2.3%); 8192^3 (+1.2%) and hundreds of nearly whole waves keep
    # the limiter
    sk = schedule(4096, 28672, 8192, 1, 132)
    assert sk.stream_k and not sk.drift
    for m, n, k in ((8192, 8192, 8192), (16384, 106496, 16384), (65536, 53248, 16384)):
        plan = schedule(m, n, k, 1, 132)
        assert plan.drift and not plan.stream_k, (m, n, k)
    # a small gain on many waves: 16384 x 14336 x 4096 (55 waves, +0.8%)
    assert schedule(16384, 14336, 4096, 1, 132).stream_k
    assert not schedule(2048, 2048, 2048, 1, 132).stream_k  # 64 cluster tiles: one wave


def test_short_one_wave_launches_are_dependent():
    """A plain launch of one wave in 2x1 clusters with at most ``SHORT_PDL_MAX_K_TILES``
    k-tiles is a programmatic dependent launch (its set-up hides behind the kernel before);
    several waves, no cluster, a longer K, the gated GEMM and the swapped / split routes keep
    to the rules they had."""
    from cute_kernels.tuning.gemm import SHORT_PDL_MAX_K_TILES, schedule

    for m, n, k in ((1024, 1024, 1024), (1024, 2048, 1024), (2048, 2048, 2048),
                    (512, 4096, 4096)):
        s = schedule(m, n, k, 1, 132)
        assert s.pdl and s.cluster_m == 2 and s.cluster_k == 1 and not s.skinny, (m, n, k)
        assert -(-k // s.tile[2]) <= SHORT_PDL_MAX_K_TILES
        assert "programmatic dependent launch" in s.describe()
    for m, n, k in ((4096, 4096, 4096), (1024, 14336, 4096),  # several waves
                    (64, 14336, 4096), (128, 14336, 4096),  # one wave, unclustered
                    (512, 4096, 14336),  # one wave, 224 k-tiles
                    (13, 14336, 4096), (1, 4096, 14336)):  # swapped
        assert not schedule(m, n, k, 1, 132).pdl, (m, n, k)
    assert not schedule(1024, 1024, 1024, 1, 132, skinny=False, gated=True).pdl
    assert not schedule(1024, 1024, 1024, 2, 132, skinny=False).pdl  # batched
