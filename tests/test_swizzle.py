"""Swizzles are conflict-free for the shared-memory accesses they exist for (and the plain
layouts are not, so these tests can fail)."""

import pytest

from layouts import (
    BYTE_SWIZZLES,
    Swizzle,
    max_bank_ways,
    row_chunk_offsets,
    sm80_ldmatrix_swizzle,
    sm80_smem_atom_k,
    swizzle_for,
)
from layouts.swizzle import SWIZZLE_ROW_BYTES

NO_SWIZZLE = Swizzle(0, 3, 3)


def test_swizzle_matches_cute_definition():
    # CuTe: Swizzle<3,4,3>: bits [7,10) XOR into bits [4,7).
    sw = BYTE_SWIZZLES["128B"]
    for off in range(4096):
        assert sw(off) == off ^ (((off >> 7) & 7) << 4)
    assert all(sw(sw(x)) == x for x in range(4096))  # an involution
    assert swizzle_for("128B", 2) == Swizzle(3, 3, 3)
    assert swizzle_for("64B", 2) == Swizzle(2, 3, 3)


@pytest.mark.parametrize("mode", ["32B", "64B", "128B"])
@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
def test_tma_wgmma_swizzle_core_matrix_reads_are_conflict_free(mode, elem_bytes):
    """wgmma reads 8x16-byte core matrices: 8 consecutive rows, one 16-byte chunk each."""
    row_bytes = SWIZZLE_ROW_BYTES[mode]
    sw = swizzle_for(mode, elem_bytes)
    for chunk in range(row_bytes // 16):
        for first in range(0, 64, 8):
            offs = row_chunk_offsets(sw, row_bytes, elem_bytes, chunk, range(first, first + 8))
            assert max_bank_ways(offs) == 1, (mode, chunk, first)


@pytest.mark.parametrize("mode", ["64B", "128B"])
def test_unswizzled_rows_do_conflict(mode):
    row_bytes = SWIZZLE_ROW_BYTES[mode]
    offs = row_chunk_offsets(NO_SWIZZLE, row_bytes, 2, 0, range(8))
    assert max_bank_ways(offs) == row_bytes // 16


@pytest.mark.parametrize("k_tile", [16, 32, 64, 128])
def test_sm80_ldmatrix_swizzle_is_conflict_free(k_tile):
    """ldmatrix.x4: 32 lanes give row addresses of four 8x8 matrices; each phase of 8 lanes
    reads 8 rows of one 16-byte chunk of a K-major bf16 tile ``k_tile`` wide."""
    sw = sm80_ldmatrix_swizzle(k_tile)
    row_bytes = sm80_smem_atom_k(k_tile) * 2  # one 8-row swizzle atom; wider K repeats it
    for m0 in range(0, 128, 16):
        for k_chunk in range(0, row_bytes // 16, 2):
            lanes = []
            for lane in range(32):
                mat, r = lane // 8, lane % 8
                row = m0 + r + 8 * (mat % 2)
                chunk = k_chunk + mat // 2
                lanes += row_chunk_offsets(sw, row_bytes, 2, chunk, range(row, row + 1))
            assert max_bank_ways(lanes) == 1, (k_tile, m0, k_chunk)


def test_bank_model():
    assert max_bank_ways([0, 128, 256, 384, 512, 640, 768, 896]) == 8
    assert max_bank_ways([i * 16 for i in range(8)]) == 1
    assert max_bank_ways([0] * 8) == 1  # broadcast
    assert max_bank_ways([0, 4, 8, 12], access_bytes=4) == 1
    with pytest.raises(ValueError):
        sm80_ldmatrix_swizzle(8)


@pytest.mark.parametrize("mode", ["32B", "64B", "128B"])
def test_swizzle_picture_columns_hold_every_chunk_once(mode):
    from layouts.visualize import _grid_swizzle

    row_bytes = SWIZZLE_ROW_BYTES[mode]
    _, phys = _grid_swizzle(swizzle_for(mode, 2), 8, row_bytes, 2)
    rows_per_128 = 128 // row_bytes  # short rows share a 128-byte bank line
    for c in range(row_bytes // 16):
        slots = {(r % rows_per_128, phys[r][c]) for r in range(8)}
        assert len(slots) == 8, (mode, c)
