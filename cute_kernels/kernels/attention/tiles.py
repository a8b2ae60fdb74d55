"""Tile facts of the Hopper attention kernel that the op layer needs before any kernel is
loaded, so they live apart from the DSL code (this module imports nothing): the default
tile, the longest-first chunk, the most splits a cluster combines, the swap-AB decode tile's
row counts, and whether a column-sum query group spans two CTAs."""

from __future__ import annotations

#: AttentionSm90's (block_m, block_n) when a configuration names none.
HOPPER_DEFAULT_TILE = (128, 128)
#: tiles per chunk of a longest-first walk (the causal kernel's in-kernel one and the ops'
#: device-side tile orders): about one wave of one-CTA-per-SM tiles, so the heads a chunk
#: reads keep their K/V in L2 while its longest tiles go first
LONGEST_FIRST_CHUNK_TILES = 128
#: the most split-KV ranges one cluster combines through DSMEM (``cluster_splits``): the
#: portable cluster size (16-CTA clusters of 64 x 64 tiles two per SM measured slower than
#: the combine kernel, perf/RESULTS.md "Decode attention")
MAX_CLUSTER_SPLITS = 8
#: query rows a swap-AB decode tile may have (``DecodeSm90``: the rows are the MMA's N)
DECODE_ROWS = (8, 16, 32, 64)


def colsum_spans_ctas(group: int, block_m: int | None) -> bool:
    """Whether a column-sum query group can span two Hopper CTAs (its query tile is not the
    group): the kernel then adds partial sums onto a zeroed output. ``attention_colsum`` asks
    before its kernel is loaded."""
    return group != (block_m or HOPPER_DEFAULT_TILE[0])
