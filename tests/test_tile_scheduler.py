import itertools

import pytest

from cute_kernels.kernels.common.tile_scheduler import grouped_tile_coord, persistent_grid


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
    from cute_kernels.tuning.gemm import DEFAULT_TILE, TILE_SPEEDS, pick_tile, wave_efficiency

    assert wave_efficiency(448, 66) == pytest.approx(448 / 462) and wave_efficiency(132, 66) == 1
    # 1024 x 14336: 4 cluster-rows x 56 tiles of 128x256 = 224 units on 66 clusters, 3.4
    # waves; 128x192 makes 300 units (4.5 waves, 91% busy) and wins
    assert cluster_tiles(1024, 14336, 1, DEFAULT_TILE, 2) == 224
    assert pick_tile(1024, 14336, 1, 132, TILE_SPEEDS, 2) == (128, 192, 64)
    assert pick_tile(512, 28672, 1, 132, TILE_SPEEDS, 2) == (128, 192, 64)
    # full waves keep the big tile
    for m, n in ((4096, 4096), (8192, 8192), (4096, 14336), (1024, 28672), (2048, 2048)):
        assert pick_tile(m, n, 1, 132, TILE_SPEEDS, 2) == DEFAULT_TILE, (m, n)
