"""Thread-value layouts of the MMA atoms cute-kernels uses, as plain data.

Conventions (CuTe's): a TV layout maps (thread, value) to a column-major offset in the atom's
tile, ``m + M * n``. For the A operand the tile is (M, K), for B it is (N, K) and for the
accumulator C it is (M, N). Threads are lanes of a warp for ``mma.sync`` and threads of a
warpgroup (128) for ``wgmma``. Every layout here is checked against the fragment tables of the
PTX ISA in ``tests/test_layouts.py``.

The gated layouts are the accumulator layouts after the gated-MLP epilogue has merged each
thread's adjacent (even, odd) column pair into one value: the column-pair value mode disappears
and the tile is half as wide, so every gated value lands at ``(m, n // 2)`` of the pair it came
from. Feeding these to the same partitioning code as the full C tile gives the half-width output
fragments without hand-built strides (the custom 16x4x16 atom of "Towards Fused Kernels for
Gated MLP", the public post on a fused gated MLP kernel in CuTe C++).
"""

from __future__ import annotations

import re

from .layout import Layout, TVLayout

# mma.sync.aligned.m16n8k16 (bf16/fp16 in, fp32 or fp16 accumulate), one warp.
# Thread t = (t0, t1) with t0 = lane % 4 ("threadID_in_group"), t1 = lane // 4 ("groupID").
SM80_16x8x16_A = TVLayout(
    "sm80_mma_a",
    Layout(((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128))),
    (16, 16),
    "mma.sync m16n8k16 A fragment: (lane, a0..a7) -> (m, k) of the 16x16 A tile",
)
SM80_16x8x16_B = TVLayout(
    "sm80_mma_b",
    Layout(((4, 8), (2, 2)), ((16, 1), (8, 64))),
    (8, 16),
    "mma.sync m16n8k16 B fragment: (lane, b0..b3) -> (n, k) of the 8x16 B tile",
)
SM80_16x8x16_C = TVLayout(
    "sm80_mma_c",
    Layout(((4, 8), (2, 2)), ((32, 1), (16, 8))),
    (16, 8),
    "mma.sync m16n8k16 C/D fragment: (lane, c0..c3) -> (m, n) of the 16x8 C tile",
)
# The imaginary 16x4x16 atom of the gated MLP: c0/c1 (and c2/c3) merge into one value.
SM80_16x4x16_GATED_C = TVLayout(
    "sm80_gated_c",
    Layout(((4, 8), 2), ((16, 1), 8)),
    (16, 4),
    "gated mma.sync C fragment: (lane, g0..g1) -> (m, n/2) of the 16x4 gated tile",
)

# The same four under the names ``cute-kernels layout`` and :func:`get_tv_layout` use.
sm80_mma_a, sm80_mma_b, sm80_mma_c = SM80_16x8x16_A, SM80_16x8x16_B, SM80_16x8x16_C
sm80_gated_c = SM80_16x4x16_GATED_C


def sm90_wgmma_c(n: int) -> TVLayout:
    """wgmma.mma_async m64nNk16 accumulator: (thread of the warpgroup, d_i) -> (m, n) of 64xN.

    Warp w owns rows 16w..16w+15; inside a warp the fragment repeats the mma.sync C pattern
    every 8 columns.
    """
    _check_wgmma_n(n)
    return TVLayout(
        f"sm90_wgmma_c_n{n}",
        Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512))),
        (64, n),
        f"wgmma m64n{n}k16 accumulator: (thread, d0..d{n // 2 - 1}) -> (m, n) of the 64x{n} tile",
    )


def sm90_gated_c(n: int) -> TVLayout:
    """The wgmma m64nNk16 accumulator after gating column pairs: a 64 x N/2 tile."""
    _check_wgmma_n(n)
    return TVLayout(
        f"sm90_gated_c_n{n}",
        Layout(((4, 8, 4), (2, n // 8)), ((64, 1, 16), (8, 256))),
        (64, n // 2),
        f"gated wgmma m64n{n} accumulator: (thread, g0..g{n // 4 - 1}) -> (m, n/2) of 64x{n // 2}",
    )


def _check_wgmma_n(n: int) -> None:
    if not (isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0):
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256], got {n!r}")


def gated_source(c: TVLayout, thread: int, value: int) -> list[tuple[int, int]]:
    """The (thread, value) registers of the accumulator layout ``c`` that gate into ``value``.

    The column pair is the first (size-2) value mode of every C layout here, so in CuTe's
    colexicographic value order gated value ``v`` comes from C values ``2v`` and ``2v + 1``
    of the same thread: the epilogue needs no data exchange between threads.
    """
    if c.layout[1].flat().shape[0] != 2:
        raise ValueError(f"{c.name}: the first value mode is not a column pair")
    if not 0 <= 2 * value + 1 < c.num_values:
        raise IndexError(f"gated value {value} is outside {c.name} ({c.num_values // 2} values)")
    return [(thread, 2 * value), (thread, 2 * value + 1)]


def tile_mma_tv(atom: TVLayout, warps: tuple[int, int], tile: tuple[int, int]) -> TVLayout:
    """The atom's C layout tiled over a CTA tile, in CuTe's TiledMMA partition order.

    ``warps = (WM, WN)`` copies of the atom side by side (thread ``t_atom + A_T * (wm + WM *
    wn)``, as ``make_tiled_mma``'s column-major atom layout), then repeated over the ``tile``:
    value ``(v_atom, rm, rn)`` sits at ``m = am + AM * (wm + WM * rm)`` and ``n = an + AN * (wn
    + WN * rn)``, which is the order of ``partition_C`` of the whole tile (atom values, MMA_M,
    MMA_N; the tests check it against the DSL for every thread). Fed the gated atom, the same
    tiling gives the half-width output fragments of the gated epilogue.
    """
    am, an = atom.tile
    wm, wn = warps
    tm, tn = tile
    if tm % (am * wm) or tn % (an * wn):
        raise ValueError(f"tile {tile} is not a multiple of the {atom.tile} atom x {warps} warps")
    rm, rn = tm // (am * wm), tn // (an * wn)

    def to_tile(offsets):
        # an atom offset am_i + AM * an_i becomes am_i + TM * an_i in the tile; each atom mode
        # moves along one axis, so strides convert one by one
        if isinstance(offsets, tuple):
            return tuple(to_tile(o) for o in offsets)
        return offsets % am + tm * (offsets // am)

    thr, val = atom.layout[0], atom.layout[1]
    shape = ((thr.shape, wm, wn), (val.shape, rm, rn))
    stride = ((to_tile(thr.stride), am, tm * an),
              (to_tile(val.stride), am * wm, tm * an * wn))
    return TVLayout(f"{atom.name}_tiled_{tm}x{tn}", Layout(shape, stride), tile,
                    f"{atom.name} over {warps} warps, repeated over a {tm}x{tn} tile")


_FIXED = {t.name: t for t in (SM80_16x8x16_A, SM80_16x8x16_B, SM80_16x8x16_C,
                              SM80_16x4x16_GATED_C)}
_PARAMETRIC = {"sm90_wgmma_c": sm90_wgmma_c, "sm90_gated_c": sm90_gated_c}


def layout_names() -> list[str]:
    """Every name :func:`get_tv_layout` accepts; in ``_n{N}`` N is the wgmma width, a multiple
    of 8 from 8 to 256 (16 when the suffix is left out)."""
    return sorted(_FIXED) + [f"{p}_n{{N}}" for p in sorted(_PARAMETRIC)]


def get_tv_layout(name: str) -> TVLayout:
    """Look a TV layout up by name, e.g. ``sm80_mma_c`` or ``sm90_wgmma_c_n64``."""
    key = name.lower()
    if key in _FIXED:
        return _FIXED[key]
    m = re.fullmatch(r"(sm90_(?:wgmma|gated)_c)(?:_n(\d+))?", key)
    if m:
        return _PARAMETRIC[m.group(1)](int(m.group(2) or 16))
    raise ValueError(f"unknown layout {name!r}; known: {', '.join(layout_names())} "
                     "(N a multiple of 8 from 8 to 256)")
