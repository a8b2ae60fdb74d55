"""The TV layouts in ``layouts`` against the PTX ISA fragment tables, element by element."""

import pytest

from layouts import (
    Layout,
    SM80_16x4x16_GATED_C,
    SM80_16x8x16_A,
    SM80_16x8x16_B,
    SM80_16x8x16_C,
    gated_source,
    get_tv_layout,
    idx2crd,
    layout_names,
    make_layout,
    sm90_gated_c,
    sm90_wgmma_c,
)

# --- PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" -----------------
# groupID = laneid >> 2, threadID_in_group = laneid % 4.


def ptx_m16n8k16_a(lane, i):  # a0..a7 -> (row, col) of A (16 x 16)
    g, t = lane >> 2, lane % 4
    row = g if i in (0, 1, 4, 5) else g + 8
    col = t * 2 + (i & 1) if i < 4 else t * 2 + (i & 1) + 8
    return row, col


def ptx_m16n8k16_b(lane, i):  # b0..b3 -> (row=k, col=n) of B (16 x 8)
    g, t = lane >> 2, lane % 4
    row = t * 2 + (i & 1) if i < 2 else t * 2 + (i & 1) + 8
    return row, g


def ptx_m16n8k16_c(lane, i):  # c0..c3 -> (row, col) of C (16 x 8)
    g, t = lane >> 2, lane % 4
    row = g if i < 2 else g + 8
    return row, t * 2 + (i & 1)


# --- PTX ISA, "wgmma .m64nNk16 register fragment layout for accumulator matrix D" ---------
def ptx_wgmma_d(thread, i):  # d0..d{N/2-1} of thread 0..127 -> (row, col) of D (64 x N)
    warp, lane = thread // 32, thread % 32
    g, t = lane >> 2, lane % 4
    row = 16 * warp + g + 8 * ((i >> 1) & 1)
    col = (i >> 2) * 8 + t * 2 + (i & 1)
    return row, col


def test_sm80_a_matches_ptx():
    for lane in range(32):
        for i in range(8):
            assert SM80_16x8x16_A.coord(lane, i) == ptx_m16n8k16_a(lane, i), (lane, i)


def test_sm80_b_matches_ptx():
    # Our B tile is (N, K): coord returns (n, k); PTX lists (k, n).
    for lane in range(32):
        for i in range(4):
            n, k = SM80_16x8x16_B.coord(lane, i)
            assert (k, n) == ptx_m16n8k16_b(lane, i), (lane, i)


def test_sm80_c_matches_ptx():
    for lane in range(32):
        for i in range(4):
            assert SM80_16x8x16_C.coord(lane, i) == ptx_m16n8k16_c(lane, i), (lane, i)


@pytest.mark.parametrize("n", [8, 16, 64, 128, 256])
def test_wgmma_c_matches_ptx(n):
    tv = sm90_wgmma_c(n)
    assert tv.num_threads == 128 and tv.num_values == n // 2
    for thread in range(128):
        for i in range(n // 2):
            assert tv.coord(thread, i) == ptx_wgmma_d(thread, i), (thread, i)


@pytest.mark.parametrize(
    "tv", [SM80_16x8x16_A, SM80_16x8x16_B, SM80_16x8x16_C, SM80_16x4x16_GATED_C,
           sm90_wgmma_c(64), sm90_gated_c(64), sm90_gated_c(256)], ids=lambda t: t.name)
def test_every_element_owned_exactly_once(tv):
    assert tv.covers_tile_once()


@pytest.mark.parametrize(
    "full, gated",
    [(SM80_16x8x16_C, SM80_16x4x16_GATED_C)]
    + [(sm90_wgmma_c(n), sm90_gated_c(n)) for n in (8, 16, 64, 128, 192, 256)],
    ids=lambda t: t.name,
)
def test_gated_layout_maps_each_pair_to_half_column(full, gated):
    """Every gated value is (m, n // 2) of its C pair, the pair is (even, odd) columns of one
    row, and it lives in the same thread: gating needs no shuffles."""
    M, N = full.tile
    assert gated.tile == (M, N // 2)
    assert gated.num_threads == full.num_threads
    assert gated.num_values * 2 == full.num_values
    for t in range(gated.num_threads):
        for v in range(gated.num_values):
            (t0, v_even), (t1, v_odd) = gated_source(full, t, v)
            assert t0 == t1 == t
            (m0, n0), (m1, n1) = full.coord(t, v_even), full.coord(t, v_odd)
            assert m0 == m1 and n0 % 2 == 0 and n1 == n0 + 1
            assert gated.coord(t, v) == (m0, n0 // 2)


def test_gated_atom_is_the_write_up_layout():
    # ((4,8),2):((16,1),8) - the CLayout of the SM80_16x4x16 gated atom of "Towards Fused
    # Kernels for Gated MLP" (docs/gated_mlp.md, References).
    assert SM80_16x4x16_GATED_C.layout == Layout(((4, 8), 2), ((16, 1), 8))


def test_layout_algebra_basics():
    lay = make_layout((4, (2, 3)))
    assert lay.stride == (1, (4, 8)) and lay.size == 24 and lay.cosize == 24
    assert [lay(i) for i in range(24)] == list(range(24))
    assert idx2crd(7, (4, (2, 3))) == (3, (1, 0))
    assert Layout((2, 4), (4, 1))((1, 3)) == 7
    assert Layout(((2, 2), 4), ((1, 2), 4)).coalesce() == Layout(16, 1)
    assert not Layout((2, 2), (1, 1)).is_injective()
    with pytest.raises(ValueError, match="not congruent"):
        Layout((2, 2), 1)


def test_named_lookup():
    assert get_tv_layout("sm90_wgmma_c_n64").tile == (64, 64)
    assert get_tv_layout("SM80_GATED_C") is SM80_16x4x16_GATED_C
    assert "sm80_mma_a" in layout_names()
    with pytest.raises(ValueError, match="unknown layout"):
        get_tv_layout("sm70_mma")
    with pytest.raises(ValueError, match="multiple of 8"):
        sm90_wgmma_c(12)
