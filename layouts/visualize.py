"""Render layouts as pictures: SVG always, PNG where matplotlib is installed.

A TV layout is drawn as its M x N tile; each cell names the thread and register that hold the
element ("T5 V2") and is colored by thread, like CuTe's ``print_latex``. A plain rank-2 layout
is drawn as its shape with each cell's offset; a rank-1 layout as one row.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

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
    return _svg(text, color, f"{sw} on {elem_bytes}-byte elements, rows of {row_bytes} B: "
                "physical chunk of each logical (row, chunk)", "r", "chunk")


def to_svg(obj: TVLayout | Layout, title: str | None = None) -> str:
    """SVG text of a TV layout or a rank-1/rank-2 layout."""
    if isinstance(obj, TVLayout):
        text, color = _grid_tv(obj)
        title = title or f"{obj.name}: {obj.layout}  tile {obj.tile[0]}x{obj.tile[1]}"
        row_label, col_label = "m", "n"
    else:
        text, color = _grid_layout(obj)
        title = title or str(obj)
        row_label, col_label = "i", "j"
    return _svg(text, color, title, row_label, col_label)


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


def to_png(obj: TVLayout | Layout, path: str | Path, title: str | None = None) -> None:
    """Write a PNG with matplotlib (raises ImportError naming the extra when it is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("PNG output needs matplotlib: pip install matplotlib") from e
    if isinstance(obj, TVLayout):
        text, color = _grid_tv(obj)
        title = title or f"{obj.name}: {obj.layout}"
    else:
        text, color = _grid_layout(obj)
        title = title or str(obj)
    M, N = len(text), len(text[0])
    fig, ax = plt.subplots(figsize=(max(4, N * 0.75), max(2, M * 0.42 + 0.8)))
    for m in range(M):
        for n in range(N):
            fill = PALETTE[color[m][n] % len(PALETTE)] if color[m][n] >= 0 else "#ffffff"
            ax.add_patch(Rectangle((n, m), 1, 1, facecolor=fill, edgecolor="black", lw=0.5))
            ax.text(n + 0.5, m + 0.5, text[m][n], ha="center", va="center", fontsize=6)
    ax.set_xlim(0, N)
    ax.set_ylim(M, 0)
    ax.set_xticks([n + 0.5 for n in range(N)], [str(n) for n in range(N)], fontsize=6)
    ax.set_yticks([m + 0.5 for m in range(M)], [str(m) for m in range(M)], fontsize=6)
    ax.set_title(title, fontsize=8)
    ax.set_aspect("auto")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def render(obj: TVLayout | Layout, out: str | Path, title: str | None = None) -> Path:
    """Write ``obj`` to ``out``; the suffix picks the format (.svg or .png)."""
    out = Path(out)
    if out.suffix.lower() == ".svg":
        out.write_text(to_svg(obj, title))
    elif out.suffix.lower() == ".png":
        to_png(obj, out, title)
    else:
        raise ValueError(f"output must end in .svg or .png, got {out.name!r}")
    return out
