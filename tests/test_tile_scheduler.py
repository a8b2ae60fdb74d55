import itertools

import pytest

from cute_kernels.kernels.tile_scheduler import grouped_tile_coord, persistent_grid


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
