"""Layout algebra for cute-kernels: MMA atom TV layouts, swizzles and a visualizer.

Pure Python, no GPU and no CUDA library needed. Kernels turn these into ``cute`` layouts at
trace time; tests check them against the PTX ISA's fragment tables.

Names are the ones ``cute-kernels layout`` takes (``layouts.catalog()`` lists them):
``layouts.sm80_gated_c`` (and ``sm80_mma_a``/``_b``/``_c``), ``layouts.sm90_wgmma_c(64)`` for
``sm90_wgmma_c_n64``, ``layouts.swizzle_tile("128B")`` for ``swizzle_128B``, or any of them
through ``layouts.lookup(name)``. The visualizer: ``layouts.render(obj, "f.svg")`` (or
``.png`` with matplotlib) and ``layouts.to_svg(obj)``, for TV layouts, plain layouts and swizzle
tiles.
"""

from .atoms import (
    SM80_16x4x16_GATED_C,
    SM80_16x8x16_A,
    SM80_16x8x16_B,
    SM80_16x8x16_C,
    gated_source,
    get_tv_layout,
    layout_names,
    sm80_gated_c,
    sm80_mma_a,
    sm80_mma_b,
    sm80_mma_c,
    sm90_gated_c,
    sm90_wgmma_c,
    tile_mma_tv,
)
from .catalog import SWIZZLE_MODES, WGMMA_N, SwizzleTile, catalog, lookup, swizzle_tile
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
from .visualize import render, swizzle_to_svg, to_png, to_svg

__all__ = [
    "BYTE_SWIZZLES",
    "Layout",
    "SM80_16x4x16_GATED_C",
    "SM80_16x8x16_A",
    "SM80_16x8x16_B",
    "SM80_16x8x16_C",
    "SWIZZLE_MODES",
    "Swizzle",
    "SwizzleTile",
    "TVLayout",
    "WGMMA_N",
    "catalog",
    "crd2idx",
    "gated_source",
    "get_tv_layout",
    "idx2crd",
    "layout_names",
    "lookup",
    "make_layout",
    "max_bank_ways",
    "render",
    "row_chunk_offsets",
    "sm80_gated_c",
    "sm80_ldmatrix_swizzle",
    "sm80_mma_a",
    "sm80_mma_b",
    "sm80_mma_c",
    "sm80_smem_atom_k",
    "sm90_gated_c",
    "sm90_wgmma_c",
    "swizzle_for",
    "swizzle_tile",
    "swizzle_to_svg",
    "tile_mma_tv",
    "to_png",
    "to_svg",
]
