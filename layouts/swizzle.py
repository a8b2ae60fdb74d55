"""Shared-memory swizzles and a bank-conflict model to check them.

``Swizzle(B, M, S)`` is CuTe's ``Swizzle<B, M, S>``: it XORs the ``B`` bits that sit ``S`` bits
above bit ``M`` into bits ``[M, M + B)`` of an offset. On byte offsets:

* TMA / wgmma 128-byte swizzle = ``Swizzle(3, 4, 3)``: 16-byte chunks, rows of 128 bytes;
* 64-byte swizzle = ``Swizzle(2, 4, 3)``; 32-byte swizzle = ``Swizzle(1, 4, 3)``.

The same functions on element offsets shift ``M`` down by log2(element bytes): for 16-bit
elements the 128-byte swizzle is ``Swizzle(3, 3, 3)``, which is also the classic sm80 swizzle
used with ``ldmatrix`` over an 8 x 64 (bf16) K-major tile.

Shared memory has 32 banks of 4 bytes. A warp's 16-byte accesses are served in 4 phases of 8
threads; a phase is conflict-free when its 8 accesses cover 8 distinct 16-byte bank groups.
:func:`max_bank_ways` counts that, and the tests use it to prove each swizzle conflict-free for
the access it is meant for (8 rows x one 16-byte column chunk: ``ldmatrix`` and wgmma core
matrices) while the unswizzled layout is not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

NUM_BANKS = 32
BANK_BYTES = 4


@dataclass(frozen=True)
class Swizzle:
    bits: int  # B: how many bits are XORed
    base: int  # M: the lowest bit that changes (log2 of the unit kept together)
    shift: int  # S: distance from the source bits down to the changed bits

    def __post_init__(self):
        if self.bits < 0 or self.base < 0 or self.shift < self.bits:
            raise ValueError(f"Swizzle{self.as_tuple()} needs B >= 0, M >= 0 and S >= B")

    def as_tuple(self) -> tuple[int, int, int]:
        return self.bits, self.base, self.shift

    def __call__(self, offset: int) -> int:
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return offset ^ ((offset & mask) >> self.shift)

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"


#: Swizzles on byte offsets, by the name TMA and wgmma give them.
BYTE_SWIZZLES = {
    "none": Swizzle(0, 4, 3),
    "32B": Swizzle(1, 4, 3),
    "64B": Swizzle(2, 4, 3),
    "128B": Swizzle(3, 4, 3),
}
#: Width in bytes of the smem row each swizzle mode is built for (the TMA box's inner extent).
SWIZZLE_ROW_BYTES = {"none": 16, "32B": 32, "64B": 64, "128B": 128}


def swizzle_for(mode: str, elem_bytes: int) -> Swizzle:
    """The swizzle ``mode`` ('32B', '64B', '128B') expressed on element offsets."""
    if mode not in BYTE_SWIZZLES:
        raise ValueError(f"swizzle mode must be one of {sorted(BYTE_SWIZZLES)}, got {mode!r}")
    if elem_bytes not in (1, 2, 4, 8, 16):
        raise ValueError(f"elem_bytes must be a power of two from 1 to 16, got {elem_bytes!r}")
    b, m, s = BYTE_SWIZZLES[mode].as_tuple()
    return Swizzle(b, m - (elem_bytes.bit_length() - 1), s)


def sm80_smem_atom_k(k_tile_elems: int, elem_bytes: int = 2) -> int:
    """Width (elements) of the swizzled smem atom for a K-major sm80 tile: at most 128 bytes.

    Wider tiles repeat the 8-row atom along K (``cute.tile_to_shape``); each atom is a
    contiguous 8 x 128-byte block, so the bank pattern inside one atom is the whole story.
    """
    return min(k_tile_elems, 128 // elem_bytes)


def sm80_ldmatrix_swizzle(k_tile_elems: int, elem_bytes: int = 2) -> Swizzle:
    """The sm80 shared-memory swizzle for a K-major tile ``k_tile_elems`` wide.

    Atoms of 128 bytes use the full 3-bit swizzle, 64-byte atoms a 2-bit one and 32-byte atoms
    a 1-bit one, so that 8 consecutive rows of one 16-byte chunk hit 8 distinct bank groups.
    """
    row_bytes = sm80_smem_atom_k(k_tile_elems, elem_bytes) * elem_bytes
    if row_bytes == 128:
        mode = "128B"
    elif row_bytes in (32, 64):
        mode = f"{row_bytes}B"
    else:
        raise ValueError(f"K tile of {row_bytes} bytes is too narrow to swizzle (need >= 32)")
    return swizzle_for(mode, elem_bytes)


def bank_groups(byte_offset: int, access_bytes: int) -> list[int]:
    """The banks a single access of ``access_bytes`` at ``byte_offset`` touches."""
    first = byte_offset // BANK_BYTES
    return [(first + i) % NUM_BANKS for i in range(max(1, access_bytes // BANK_BYTES))]


def max_bank_ways(byte_offsets: list[int], access_bytes: int = 16) -> int:
    """Worst bank conflict (ways) over the phases of one warp-wide access.

    Threads are grouped into phases of ``128 // access_bytes`` (8 for 16-byte accesses); within
    a phase, accesses to the same address broadcast, different addresses in one bank serialize.
    Returns 1 when every phase is conflict-free.
    """
    per_phase = max(1, 128 // access_bytes)
    worst = 1
    for start in range(0, len(byte_offsets), per_phase):
        phase = sorted(set(byte_offsets[start:start + per_phase]))
        banks = Counter(b for off in phase for b in bank_groups(off, access_bytes))
        worst = max(worst, max(banks.values()))
    return worst


def row_chunk_offsets(
    swizzle: Swizzle, row_bytes: int, elem_bytes: int, chunk: int, rows: range
) -> list[int]:
    """Byte offsets of the 16-byte ``chunk`` of each row in ``rows`` of a row-major smem tile.

    The tile is ``row_bytes`` wide; ``swizzle`` acts on element offsets, as it does in a
    ``cute.make_composed_layout(swizzle, 0, layout)`` smem layout.
    """
    elems_per_chunk = 16 // elem_bytes
    row_elems = row_bytes // elem_bytes
    return [
        swizzle(r * row_elems + chunk * elems_per_chunk) * elem_bytes
        for r in rows
    ]
