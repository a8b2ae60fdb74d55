"""A small, exact, pure-Python model of CuTe layouts.

A layout is a pair of congruent nested tuples ``shape : stride``. It maps a coordinate (or a
flat column-major index) to an integer offset. This module mirrors the semantics of CuTe's
``Layout`` (colexicographic coordinates, hierarchical modes) for the subset we need on the host:
evaluating layouts, sizes, flattening and coalescing. It never imports a GPU library, so every
layout in :mod:`layouts.atoms` can be tested on any machine, and converted to a real
``cute.Layout`` inside a ``@cute.jit`` function with ``cute.make_layout(l.shape, stride=l.stride)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

IntTuple = int | tuple


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def flatten(t: IntTuple) -> tuple:
    """Flatten a nested tuple into a tuple of ints."""
    if is_int(t):
        return (t,)
    return tuple(v for m in t for v in flatten(m))


def product(t: IntTuple) -> int:
    return t if is_int(t) else prod(product(m) for m in t)


def congruent(a: IntTuple, b: IntTuple) -> bool:
    if is_int(a) or is_int(b):
        return is_int(a) and is_int(b)
    return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """Column-major (colexicographic) index -> natural coordinate of ``shape``."""
    if is_int(shape):
        return idx % shape if shape else 0
    crd = []
    for mode in shape:
        crd.append(idx2crd(idx % product(mode), mode))
        idx //= product(mode)
    return tuple(crd)


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    """Inner product of a coordinate with the stride; an int coordinate is unflattened first."""
    if is_int(shape):
        if not is_int(crd):
            raise ValueError(f"coordinate {crd} is deeper than shape {shape}")
        return crd * stride
    if is_int(crd):
        crd = idx2crd(crd, shape)
    if len(crd) != len(shape):
        raise ValueError(f"coordinate {crd} does not match the rank of shape {shape}")
    return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride))


def compact_col_major(shape: IntTuple, start: int = 1) -> IntTuple:
    """Strides of the compact column-major layout of ``shape`` (CuTe's LayoutLeft)."""
    if is_int(shape):
        return start
    strides = []
    for mode in shape:
        strides.append(compact_col_major(mode, start))
        start *= product(mode)
    return tuple(strides)


@dataclass(frozen=True)
class Layout:
    """``shape : stride``, both nested int tuples of the same profile."""

    shape: IntTuple
    stride: IntTuple

    def __post_init__(self):
        if not congruent(self.shape, self.stride):
            raise ValueError(f"shape {self.shape} and stride {self.stride} are not congruent")

    def __call__(self, crd: IntTuple) -> int:
        return crd2idx(crd, self.shape, self.stride)

    def __getitem__(self, mode: int) -> Layout:
        if is_int(self.shape):
            raise IndexError("a rank-0 (integer) layout has no modes")
        return Layout(self.shape[mode], self.stride[mode])

    @property
    def rank(self) -> int:
        return 1 if is_int(self.shape) else len(self.shape)

    @property
    def size(self) -> int:
        return product(self.shape)

    @property
    def cosize(self) -> int:
        """One past the largest offset the layout produces."""
        return self(self.size - 1) + 1 if self.size else 0

    def flat(self) -> Layout:
        return Layout(flatten(self.shape), flatten(self.stride))

    def coalesce(self) -> Layout:
        """Merge adjacent modes that are contiguous in each other (same function, fewer modes)."""
        modes = [(s, d) for s, d in zip(flatten(self.shape), flatten(self.stride)) if s != 1]
        out: list[tuple[int, int]] = []
        for s, d in modes:
            if out and out[-1][0] * out[-1][1] == d:
                out[-1] = (out[-1][0] * s, out[-1][1])
            else:
                out.append((s, d))
        if not out:
            return Layout(1, 0)
        if len(out) == 1:
            return Layout(*out[0])
        return Layout(tuple(s for s, _ in out), tuple(d for _, d in out))

    def offsets(self) -> list[int]:
        """The offset of every index 0 .. size-1, in order."""
        return [self(i) for i in range(self.size)]

    def is_injective(self) -> bool:
        offs = self.offsets()
        return len(set(offs)) == len(offs)

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"


def _fmt(t: IntTuple) -> str:
    return str(t) if is_int(t) else "(" + ",".join(_fmt(m) for m in t) + ")"


def make_layout(shape: IntTuple, stride: IntTuple | None = None) -> Layout:
    """A layout; without a stride, the compact column-major one (as ``cute.make_layout``)."""
    return Layout(shape, compact_col_major(shape) if stride is None else stride)


@dataclass(frozen=True)
class TVLayout:
    """A thread-value layout: (thread, value) -> element of an ``M x N`` tile.

    ``layout`` has two modes, threads and values; its offsets index the tile in column-major
    order (``m + M * n``), which is CuTe's convention for MMA atom layouts.
    """

    name: str
    layout: Layout
    tile: tuple[int, int]
    description: str = ""

    @property
    def num_threads(self) -> int:
        return self.layout[0].size

    @property
    def num_values(self) -> int:
        return self.layout[1].size

    def coord(self, thread: int, value: int) -> tuple[int, int]:
        """(m, n) of the element that ``thread`` holds as its ``value``-th register."""
        if not (0 <= thread < self.num_threads and 0 <= value < self.num_values):
            raise IndexError(f"(thread={thread}, value={value}) is outside {self.layout.shape}")
        offset = self.layout((thread, value))
        return offset % self.tile[0], offset // self.tile[0]

    def table(self) -> dict[tuple[int, int], tuple[int, int]]:
        """{(thread, value): (m, n)} for every register of every thread."""
        return {
            (t, v): self.coord(t, v)
            for t in range(self.num_threads)
            for v in range(self.num_values)
        }

    def owners(self) -> list[list[list[tuple[int, int]]]]:
        """owners[m][n] = every (thread, value) that holds element (m, n)."""
        M, N = self.tile
        grid: list[list[list[tuple[int, int]]]] = [[[] for _ in range(N)] for _ in range(M)]
        for (t, v), (m, n) in self.table().items():
            grid[m][n].append((t, v))
        return grid

    def covers_tile_once(self) -> bool:
        return all(len(cell) == 1 for row in self.owners() for cell in row)
