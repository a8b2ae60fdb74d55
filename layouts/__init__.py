"""Layout algebra for cute-kernels: MMA atom TV layouts, swizzles and a visualizer.

Pure Python, no GPU and no CUDA library needed. Kernels turn these into ``cute`` layouts at
trace time; tests check them against the PTX ISA's fragment tables.
"""

from .atoms import (
    SM80_16x4x16_GATED_C,
    SM80_16x8x16_A,
    SM80_16x8x16_B,
    SM80_16x8x16_C,
    gated_source,
    get_tv_layout,
    layout_names,
    sm90_gated_c,
    sm90_wgmma_c,
    tile_mma_tv,
)
from .layout import Layout, TVLayout, crd2idx, idx2crd, make_layout
from .swizzle import (
    BYTE_SWIZZLES,
    Swizzle,
    max_bank_ways,
    row_chunk_offsets,
    sm80_ldmatrix_swizzle,
    sm80_smem_atom_k,
    swizzle_for,
)

__all__ = [
    "BYTE_SWIZZLES",
    "Layout",
    "SM80_16x4x16_GATED_C",
    "SM80_16x8x16_A",
    "SM80_16x8x16_B",
    "SM80_16x8x16_C",
    "Swizzle",
    "TVLayout",
    "crd2idx",
    "gated_source",
    "get_tv_layout",
    "idx2crd",
    "layout_names",
    "make_layout",
    "max_bank_ways",
    "row_chunk_offsets",
    "sm80_ldmatrix_swizzle",
    "sm80_smem_atom_k",
    "sm90_gated_c",
    "sm90_wgmma_c",
    "swizzle_for",
    "tile_mma_tv",
]
