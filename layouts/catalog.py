"""Every layout and swizzle by the name ``cute-kernels layout NAME`` uses, one lookup for both.

The same names work in Python:

* the fixed MMA fragments are attributes: ``layouts.sm80_mma_a``, ``sm80_mma_b``,
  ``sm80_mma_c``, ``sm80_gated_c``;
* ``sm90_wgmma_c_n<N>`` and ``sm90_gated_c_n<N>`` are ``layouts.sm90_wgmma_c(N)`` and
  ``layouts.sm90_gated_c(N)``, N a multiple of 8 from 8 to 256;
* ``swizzle_32B``, ``swizzle_64B``, ``swizzle_128B`` are ``layouts.swizzle_tile("128B")``: the
  swizzle on bf16 elements over one row of its width (``swizzle_for(mode, 2)`` is the bare
  swizzle);
* ``layouts.lookup(name)`` takes any of them, and :func:`catalog` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .atoms import (
    SM80_16x4x16_GATED_C,
    SM80_16x8x16_A,
    SM80_16x8x16_B,
    SM80_16x8x16_C,
    get_tv_layout,
)
from .layout import TVLayout
from .swizzle import SWIZZLE_ROW_BYTES, Swizzle, swizzle_for

#: the swizzle modes that have pictures (``swizzle_<mode>``)
SWIZZLE_MODES = ("32B", "64B", "128B")
#: the wgmma accumulator widths N of ``sm90_*_c_n<N>``
WGMMA_N = tuple(range(8, 257, 8))
N_RULE = "N a multiple of 8 from 8 to 256"


@dataclass(frozen=True)
class SwizzleTile:
    """A swizzle mode over shared-memory rows of its width: what ``swizzle_<mode>`` draws
    (which physical 16-byte chunk each logical (row, chunk) is stored in)."""

    name: str
    swizzle: Swizzle
    row_bytes: int
    elem_bytes: int = 2
    rows: int = 8

    @property
    def description(self) -> str:
        return (f"{self.swizzle} on {self.elem_bytes}-byte elements, rows of {self.row_bytes} B: "
                "the physical 16-byte chunk of each logical (row, chunk)")


def swizzle_tile(mode: str, elem_bytes: int = 2) -> SwizzleTile:
    """The ``swizzle_<mode>`` picture's subject: ``mode`` '32B', '64B' or '128B'."""
    if mode not in SWIZZLE_MODES:
        raise ValueError(f"swizzle mode must be one of {', '.join(SWIZZLE_MODES)}, got {mode!r}")
    return SwizzleTile(f"swizzle_{mode}", swizzle_for(mode, elem_bytes), SWIZZLE_ROW_BYTES[mode],
                       elem_bytes)


def catalog() -> dict[str, str]:
    """{name: what it is} for every name :func:`lookup` takes (``<N>``: see ``N_RULE``)."""
    out = {t.name: f"{t.description} (layouts.{t.name})"
           for t in (SM80_16x8x16_A, SM80_16x8x16_B, SM80_16x8x16_C, SM80_16x4x16_GATED_C)}
    out["sm90_wgmma_c_n<N>"] = (f"wgmma m64nNk16 accumulator, 64xN tile; {N_RULE} "
                                "(layouts.sm90_wgmma_c(N))")
    out["sm90_gated_c_n<N>"] = (f"the wgmma accumulator after gating, 64x(N/2) tile; {N_RULE} "
                                "(layouts.sm90_gated_c(N))")
    for mode in SWIZZLE_MODES:
        out[f"swizzle_{mode}"] = (f"the {mode} smem swizzle on bf16, rows of "
                                  f"{SWIZZLE_ROW_BYTES[mode]} B (layouts.swizzle_tile({mode!r}))")
    return out


def lookup(name: str) -> TVLayout | SwizzleTile:
    """The TV layout or swizzle tile called ``name`` (a key of :func:`catalog`, ``<N>`` filled
    in, e.g. ``sm90_gated_c_n64``). Raises ValueError naming every valid name."""
    if name.startswith("swizzle_") and name.removeprefix("swizzle_") in SWIZZLE_MODES:
        return swizzle_tile(name.removeprefix("swizzle_"))
    try:
        return get_tv_layout(name)
    except ValueError as e:
        if "wgmma N" in str(e):  # a known template with a bad N
            raise
    raise ValueError(f"unknown layout {name!r}; known: {', '.join(catalog())} ({N_RULE})")


__all__ = ["N_RULE", "SWIZZLE_MODES", "WGMMA_N", "SwizzleTile", "catalog", "lookup",
           "swizzle_tile"]
