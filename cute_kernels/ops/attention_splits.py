"""How many key splits ``attention`` runs when ``num_splits`` is None (flash-decoding).

Split-KV pays a fixed price (a workspace, a second kernel that combines the partials) for
filling SMs that a few query tiles leave idle. The rule: below ``MIN_AUTO_SPLIT_KEYS`` keys
never, above it the smallest n that fills the SMs about as well as the best
(``splits_heuristic``). perf/decode.py on an H200 (perf/RESULTS.md "Decode attention"), B1
H32 H_kv 8 D128, n = 1 against the heuristic's n, GPU time in CUDA graphs: S_kv 64k 0.58
against 0.072 ms; S_kv 4k 0.042 against 0.016 (n 7); S_kv 2k 0.024 against 0.015 (n 4).
Eager calls of these short shapes are host-bound (the split route's second launch and
workspace cost ~12 us of host time): at S_kv 4k the split still won eager (0.045 against
0.041 ms), at 2k it lost (0.030 against 0.042), so the floor is 4,096 keys, where neither
way of calling loses (8,192 until the H200 run of 2026-11-26; an H100 run before plans were
cached had had splits 9-19% slower eager at 4k).
Pure Python: the perf script and the tests import it without a GPU.
"""

from __future__ import annotations

import math

#: the attention kernel's tile: 128 query rows, 128 keys per block (the split route caps
#: num_splits at the number of key blocks)
BLOCK_M, BLOCK_N = 128, 128
MIN_BLOCKS_PER_SPLIT = 4
#: ``splits_heuristic`` takes the fewest splits whose wave efficiency is within this share of
#: the best. FlashAttention-2 uses 0.85 (fewer partials to combine); with the combine a
#: dependent launch from the same host call, the fuller wave wins: B1 H_kv 8 S_kv 64k, 16
#: splits (0.97 of a wave) against 0.85's 14 (0.85): H100 0.099 against 0.101-0.102 ms, H200
#: 0.070-0.072 against 0.071-0.072 (perf/RESULTS.md "Decode attention")
FILL_WITHIN = 0.95
#: the shortest key sequence ``num_splits=None`` splits
MIN_AUTO_SPLIT_KEYS = 4096


def query_tiles(b: int, h_kv: int, s_q: int, q_per_kv: int, causal: bool,
                block_m: int = BLOCK_M) -> int:
    """The query tiles (CTAs per split) the op launches: the q_per_kv query heads of a KV
    head share tiles where it packs them (``packs_query_heads``), else one per query head."""
    from .attention import packs_query_heads

    if packs_query_heads(h_kv * q_per_kv, h_kv, s_q, causal):
        return -(-(q_per_kv * s_q) // block_m) * h_kv * b
    return -(-s_q // block_m) * h_kv * q_per_kv * b


def splits_heuristic(b: int, h_kv: int, s_q: int, s_kv: int, sms: int, *, q_per_kv: int = 1,
                     causal: bool = False, block_m: int = BLOCK_M, block_n: int = BLOCK_N,
                     min_blocks: int = MIN_BLOCKS_PER_SPLIT, max_waves: int = 2,
                     max_splits: int = 128) -> int:
    """num_splits for a decode call, flash-decoding style: enough CTAs to fill the SMs.

    Our split kernel launches (query tiles) x B CTAs per split, one CTA per SM (the
    128 x 128 D 128 tiles' shared memory): with ``causal`` left out of GQA packing (the op's
    ``packs_query_heads``: decode shapes) the q_per_kv query heads of a KV head share tiles,
    ceil(q_per_kv s_q / block_m) x h_kv of them; otherwise ceil(s_q / block_m) x h_kv x
    q_per_kv, each query head in its own. Already a wave (tiles >= sms): 1. Otherwise among
    n = 1 .. min(max_splits, blocks // min_blocks) (at least ``min_blocks`` key blocks per
    split; blocks = ceil(s_kv / block_n)) with n x tiles <= max_waves waves, skipping an n
    whose blocks per split equal those of n - 1 (it only adds empty splits), the smallest n
    whose wave efficiency (waves / ceil(waves)) is within ``FILL_WITHIN`` of the best
    (FlashAttention-2's rule, with its 0.85 raised to 0.95), so few splits unless more fill
    the last wave better."""
    tiles = query_tiles(b, h_kv, s_q, q_per_kv, causal, block_m)
    blocks = -(-s_kv // block_n)
    cap = max(1, min(max_splits, blocks // min_blocks))
    if tiles >= sms or cap == 1:
        return 1
    efficiency = {}
    for n in range(1, cap + 1):
        if tiles * n > max_waves * sms:
            break
        if n > 1 and -(-blocks // n) == -(-blocks // (n - 1)):
            continue
        waves = tiles * n / sms
        efficiency[n] = waves / math.ceil(waves)
    top = max(efficiency.values())
    return min(n for n, e in efficiency.items() if e >= FILL_WITHIN * top)


def auto_splits(b: int, h_kv: int, s_q: int, s_kv: int, sms: int, *, q_per_kv: int = 1,
                causal: bool = False) -> int:
    """``attention``'s num_splits when the caller gives None: 1 below
    ``MIN_AUTO_SPLIT_KEYS`` keys, else :func:`splits_heuristic`."""
    if s_kv < MIN_AUTO_SPLIT_KEYS:
        return 1
    return splits_heuristic(b, h_kv, s_q, s_kv, sms, q_per_kv=q_per_kv, causal=causal)
