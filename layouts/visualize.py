"""Render layouts as pictures: SVG always, PNG where matplotlib is installed.

A TV layout is drawn as its M x N tile; each cell names the thread and register that hold the
element ("T5 V2") and is colored by thread, like CuTe's ``print_latex``. A plain rank-2 layout
is drawn as its shape with each cell's offset; a rank-1 layout as one row; a swizzle tile
(``layouts.swizzle_tile``) as the physical chunk of each logical (row, 16-byte chunk).

``render(obj, "f.svg" | "f.png")`` writes any of them; ``to_svg`` returns the SVG text.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from .catalog import SwizzleTile
from .layout import Layout, TVLayout
from .swizzle import Swizzle

# 8 soft colors, repeated per thread (CuTe's print_latex uses the same idea).
PALETTE = ["#afafff", "#afffaf", "#ffafaf", "#ffffaf", "#afffff", "#ffafff", "#d7d7d7", "#ffd7af"]
CELL_W, CELL_H, MARGIN = 44, 26, 30


def _grid_tv(tv: TVLayout) -> tuple[list[list[str]], list[list[int]]]:
    M, N = tv.tile
    text = [["" for _ in range(N)] for _ in range(M)]
    color = [[-1 for _ in range(N)] for _ in range(M)]
    for m, row in enumerate(tv.owners()):
        for n, owners in enumerate(row):
            if owners:
                t, v = owners[0]
                text[m][n] = f"T{t} V{v}" + ("*" if len(owners) > 1 else "")
                color[m][n] = t
    return text, color


def _grid_layout(layout: Layout) -> tuple[list[list[str]], list[list[int]]]:
    if layout.rank == 1:
        offs = layout.offsets()
        return [[str(o) for o in offs]], [offs]
    if layout.rank != 2:
        raise ValueError(f"can draw layouts of rank 1 or 2, got rank {layout.rank}: {layout}")
    M, N = layout[0].size, layout[1].size
    offs = [[layout((m, n)) for n in range(N)] for m in range(M)]
    return [[str(o) for o in row] for row in offs], offs


def _grid_swizzle(sw: Swizzle, rows: int, row_bytes: int, elem_bytes: int):
    """Logical (row, 16-byte chunk) -> the physical chunk it is stored in, within its row."""
    chunks, per_chunk = row_bytes // 16, 16 // elem_bytes
    phys = [[(sw(r * chunks * per_chunk + c * per_chunk) // per_chunk) % chunks
             for c in range(chunks)] for r in range(rows)]
    return [[f"c{p}" for p in row] for row in phys], phys


def swizzle_to_svg(sw: Swizzle, rows: int = 8, row_bytes: int = 128, elem_bytes: int = 2) -> str:
    """Where each logical 16-byte chunk of a ``row_bytes``-wide smem tile lands (colored by the
    bank group it occupies): a conflict-free swizzle shows every color once per column."""
    text, color = _grid_swizzle(sw, rows, row_bytes, elem_bytes)
    return _svg(text, color, _swizzle_title(sw, row_bytes, elem_bytes), "r", "chunk")


def _swizzle_title(sw: Swizzle, row_bytes: int, elem_bytes: int) -> str:
    return (f"{sw} on {elem_bytes}-byte elements, rows of {row_bytes} B: "
            "physical chunk of each logical (row, chunk)")


def _grid(obj, title: str | None):
    """(text, color, title, row label, column label) of anything this module draws."""
    if isinstance(obj, SwizzleTile):
        text, color = _grid_swizzle(obj.swizzle, obj.rows, obj.row_bytes, obj.elem_bytes)
        return (text, color, title or _swizzle_title(obj.swizzle, obj.row_bytes,
                                                     obj.elem_bytes), "r", "chunk")
    if isinstance(obj, TVLayout):
        text, color = _grid_tv(obj)
        return (text, color, title or f"{obj.name}: {obj.layout}  tile {obj.tile[0]}x"
                f"{obj.tile[1]}", "m", "n")
    if isinstance(obj, Layout):
        text, color = _grid_layout(obj)
        return text, color, title or str(obj), "i", "j"
    raise TypeError(f"can draw a TVLayout, a Layout or a SwizzleTile, got {type(obj).__name__}")


def to_svg(obj: TVLayout | Layout | SwizzleTile, title: str | None = None) -> str:
    """SVG text of a TV layout, a rank-1/rank-2 layout or a swizzle tile."""
    return _svg(*_grid(obj, title))


def _svg(text, color, title, row_label, col_label) -> str:
    M, N = len(text), len(text[0])
    width, height = 2 * MARGIN + N * CELL_W, 2 * MARGIN + M * CELL_H + 16
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="9">',
        f'<text x="{MARGIN}" y="14" font-size="12">{escape(title)}</text>',
    ]
    top = MARGIN + 10
    for n in range(N):
        x = MARGIN + n * CELL_W + CELL_W / 2
        out.append(f'<text x="{x}" y="{top - 4}" text-anchor="middle">{col_label}{n}</text>')
    for m in range(M):
        y = top + m * CELL_H
        out.append(f'<text x="{MARGIN - 4}" y="{y + CELL_H / 2 + 3}" text-anchor="end">'
                   f'{row_label}{m}</text>')
        for n in range(N):
            x = MARGIN + n * CELL_W
            fill = PALETTE[color[m][n] % len(PALETTE)] if color[m][n] >= 0 else "#ffffff"
            out.append(f'<rect x="{x}" y="{y}" width="{CELL_W}" height="{CELL_H}" '
                       f'fill="{fill}" stroke="#000" stroke-width="0.5"/>')
            out.append(f'<text x="{x + CELL_W / 2}" y="{y + CELL_H / 2 + 3}" '
                       f'text-anchor="middle">{escape(text[m][n])}</text>')
    out.append("</svg>")
    return "\n".join(out)


#: PNG pictures are at most this many pixels on their longer side.
MAX_PNG_PIXELS = 4000
#: grids of more cells than this are drawn in the compact form (colors only: matplotlib takes
#: about a millisecond per label, and the labels of a 64x64 tile are unreadable at that size)
MAX_LABELLED_CELLS = 1024
_PNG_CELL_IN = (0.75, 0.42)  # labelled cell width, height in inches
_COMPACT_CELL_IN = (0.2, 0.2)
_PNG_DPI = 150


def png_geometry(rows: int, cols: int) -> tuple[tuple[float, float], int, bool]:
    """(figure size in inches, dpi, labelled) of a ``rows`` x ``cols`` grid's PNG: labelled
    cells up to ``MAX_LABELLED_CELLS``, small colored cells beyond; 150 dpi, or less so that
    neither side exceeds ``MAX_PNG_PIXELS``."""
    labelled = rows * cols <= MAX_LABELLED_CELLS
    cell_w, cell_h = _PNG_CELL_IN if labelled else _COMPACT_CELL_IN
    fig_w = max(4.0, cols * cell_w + 0.7)
    fig_h = max(2.0, rows * cell_h + 0.8)
    dpi = min(_PNG_DPI, int(MAX_PNG_PIXELS / max(fig_w, fig_h)))
    return (fig_w, fig_h), dpi, labelled


def to_png(obj: TVLayout | Layout | SwizzleTile, path: str | Path,
           title: str | None = None) -> None:
    """Write a PNG with matplotlib (raises ImportError naming the package when it is missing).

    Grids of more than ``MAX_LABELLED_CELLS`` cells (a 64x256 wgmma accumulator has 16384) are
    drawn in a compact form: small cells colored by thread, no labels (the SVG keeps them at
    any size); no picture exceeds ``MAX_PNG_PIXELS`` a side.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import to_rgb
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("PNG output needs matplotlib: pip install matplotlib") from e
    text, color, title, _, _ = _grid(obj, title)
    M, N = len(text), len(text[0])
    figsize, dpi, labelled = png_geometry(M, N)
    if not labelled:
        title += f"  (compact: {M}x{N} cells colored by thread; the .svg has the labels)"
    import numpy as np

    lut = np.array([to_rgb(c) for c in [*PALETTE, "#ffffff"]])  # index -1: empty cell
    rgb = lut[np.where(np.array(color) >= 0, np.array(color) % len(PALETTE), -1)]
    fig, ax = plt.subplots(figsize=figsize)
    # fixed margins in inches (a tight layout would draw every label twice)
    fig.subplots_adjust(left=0.5 / figsize[0], right=1 - 0.2 / figsize[0],
                        bottom=0.35 / figsize[1], top=1 - 0.45 / figsize[1])
    # one image for the colors (fast at any size), grid lines, then labels if they fit
    ax.imshow(rgb, extent=(0, N, M, 0), interpolation="nearest", aspect="auto")
    ax.set_xticks(range(N + 1), minor=True)
    ax.set_yticks(range(M + 1), minor=True)
    ax.grid(which="minor", color="black", linewidth=0.5 if labelled else 0.2)
    ax.tick_params(which="minor", length=0)
    if labelled:
        for m in range(M):
            for n in range(N):
                ax.text(n + 0.5, m + 0.5, text[m][n], ha="center", va="center", fontsize=6)
    step = 1 if labelled else 8
    ax.set_xticks([n + 0.5 for n in range(0, N, step)], [str(n) for n in range(0, N, step)],
                  fontsize=6)
    ax.set_yticks([m + 0.5 for m in range(0, M, step)], [str(m) for m in range(0, M, step)],
                  fontsize=6)
    ax.set_title(title, fontsize=8)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


#: the file suffixes :func:`render` writes
FORMATS = (".svg", ".png")


def render(obj: TVLayout | Layout | SwizzleTile, out: str | Path,
           title: str | None = None) -> Path:
    """Write ``obj`` to ``out``; the suffix picks the format (.svg, or .png with matplotlib)."""
    out = Path(out)
    if out.suffix.lower() == ".svg":
        out.write_text(to_svg(obj, title))
    elif out.suffix.lower() == ".png":
        to_png(obj, out, title)
    else:
        raise ValueError(f"output must end in .svg or .png, got {out.name!r}")
    return out
