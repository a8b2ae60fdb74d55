"""The `layouts` atom data equals the TV layouts the CuTe DSL itself attaches to the MMA atoms
(traced on the host; no GPU), so kernels partitioning with either see the same fragments."""

import pytest

cutlass = pytest.importorskip("cutlass")
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.nvgpu import OperandMajorMode, warp, warpgroup  # noqa: E402

from layouts import (  # noqa: E402
    SM80_16x4x16_GATED_C,
    SM80_16x8x16_A,
    SM80_16x8x16_B,
    SM80_16x8x16_C,
    sm90_gated_c,
    sm90_wgmma_c,
    tile_mma_tv,
)


def _dsl_layouts():
    seen = {}

    @cute.jit
    def trace():
        atom = cute.make_mma_atom(warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32,
                                                    (16, 8, 16)))
        for name, lay in (("A", atom.tv_layout_A), ("B", atom.tv_layout_B),
                          ("C", atom.tv_layout_C)):
            seen[name] = (lay.shape, lay.stride)
        for n in (16, 64, 128, 256):
            wg = cute.make_mma_atom(warpgroup.MmaF16BF16Op(
                cutlass.BFloat16, cutlass.Float32, (64, n, 16), warpgroup.OperandSource.SMEM,
                OperandMajorMode.K, OperandMajorMode.K))
            seen[f"wgmma{n}"] = (wg.tv_layout_C.shape, wg.tv_layout_C.stride)

    cute.compile(trace, options="--gpu-arch sm_90a")
    return seen


@pytest.fixture(scope="module")
def dsl():
    return _dsl_layouts()


def test_sm80_atoms_match_dsl(dsl):
    for name, ours in (("A", SM80_16x8x16_A), ("B", SM80_16x8x16_B), ("C", SM80_16x8x16_C)):
        assert dsl[name] == (ours.layout.shape, ours.layout.stride), name


@pytest.mark.parametrize("n", [16, 64, 128, 256])
def test_wgmma_accumulator_matches_dsl(dsl, n):
    ours = sm90_wgmma_c(n).layout
    assert dsl[f"wgmma{n}"] == (ours.shape, ours.stride)


def _dsl_partition_coords(kind, tile, threads):
    """{thread: [(m, n) of each accumulator value]} from the DSL's own ``partition_C``."""
    import cutlass.utils.hopper_helpers as sm90_utils

    seen = {}

    @cute.jit
    def trace():
        if cutlass.const_expr(kind == "sm80"):
            tiled = cute.make_tiled_mma(
                warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)), (2, 2, 1),
                permutation_mnk=(32, 32, 16))
        else:
            tiled = sm90_utils.make_trivial_tiled_mma(
                cutlass.BFloat16, cutlass.BFloat16, OperandMajorMode.K, OperandMajorMode.K,
                cutlass.Float32, (2, 1, 1), tiler_mn=(64, tile[1]))
        ident = cute.make_identity_tensor(tile)
        for t in threads:
            part = tiled.get_slice(t).partition_C(ident)
            seen[t] = [tuple(part[i]) for i in range(cute.size(part))]

    cute.compile(trace, options="--gpu-arch sm_90a")
    return seen


# the GEMM kernels' CTA tiles: sm80 2x2 warps of m16n8k16 over 128x128, sm90 two
# warpgroups of m64n256 over 128x256
TILINGS = [("sm80", SM80_16x8x16_C, SM80_16x4x16_GATED_C, (2, 2), (128, 128)),
           ("sm90", sm90_wgmma_c(256), sm90_gated_c(256), (2, 1), (128, 256))]


@pytest.mark.parametrize("kind, atom, gated_atom, warps, tile", TILINGS, ids=["sm80", "sm90"])
def test_tiled_c_matches_dsl_partition_and_gates_in_thread(kind, atom, gated_atom, warps, tile):
    """``tile_mma_tv`` reproduces the DSL's ``partition_C`` of the whole CTA tile value by
    value, and the same tiling fed the gated atom puts gated value v of every thread at
    (m, n // 2) of that thread's accumulator values 2v and 2v + 1: the kernels fill the gated
    fragment from in-thread pairs and store it with this layout."""
    full = tile_mma_tv(atom, warps, tile)
    gated = tile_mma_tv(gated_atom, warps, (tile[0], tile[1] // 2))
    threads = list(range(0, full.num_threads, 7)) + [full.num_threads - 1]
    dsl = _dsl_partition_coords(kind, tile, threads)
    assert gated.covers_tile_once()
    for t in threads:
        assert dsl[t] == [full.coord(t, v) for v in range(full.num_values)], t
        for v in range(gated.num_values):
            m, n = full.coord(t, 2 * v)
            assert full.coord(t, 2 * v + 1) == (m, n + 1) and n % 2 == 0
            assert gated.coord(t, v) == (m, n // 2), (t, v)
