"""The `layouts` atom data equals the TV layouts the CuTe DSL itself attaches to the MMA atoms
(traced on the host; no GPU), so kernels partitioning with either see the same fragments."""

import pytest

cutlass = pytest.importorskip("cutlass")
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.nvgpu import OperandMajorMode, warp, warpgroup  # noqa: E402

from layouts import SM80_16x8x16_A, SM80_16x8x16_B, SM80_16x8x16_C, sm90_wgmma_c  # noqa: E402


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
