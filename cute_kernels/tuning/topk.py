"""The top-k kernel's sampled-candidates plan (kernels/topk.py, steps 4-6): how many keys to
sample, which sampled key becomes the threshold, and the shared-memory candidate buffer (and
CTA size) that holds the keys above it. Re-measure with perf/topk_tuning.py."""

from __future__ import annotations

import math
from typing import NamedTuple

#: keys sampled per row (kernels/topk.py SAMPLES: the kernel's compile-time default)
SAMPLES = 2048
#: standard deviations of the sample's rank error the threshold is lowered by: a row whose
#: candidates still miss the k-th largest (probability ~3e-5 at 4) takes the exact path
Z = 4.0
#: candidate buffers, smallest first: (keys, threads). 4096 keys (32 KiB) leave room for four
#: 512-thread CTAs per SM; 16,384 (128 KiB) one
CANDIDATE_BUFFERS = ((4096, 512), (16384, 512))


class TopkPlan(NamedTuple):
    candidates: int  # 0: the plain radix select
    threads: int
    sample_rank: int  # 0: the plain radix select


EXACT = TopkPlan(0, 512, 0)


def topk_plan(n: int, k: int) -> TopkPlan:
    """The plan for k of n columns: the sampled candidates when the row is long enough to
    sample (n >= 4 x SAMPLES) and the keys above the threshold fit a buffer with room for
    Z more standard deviations; else the plain radix select."""
    if n < 4 * SAMPLES or k >= n:
        return EXACT
    p = k / n
    rank = math.floor(SAMPLES * p + Z * math.sqrt(SAMPLES * p * (1 - p))) + 1
    if rank > SAMPLES:
        return EXACT
    # the share of keys >= the rank-th largest sample is about Beta(rank, SAMPLES - rank + 1)
    q = rank / SAMPLES
    expected = n * (q + Z * math.sqrt(q * (1 - q) / SAMPLES))
    for keys, threads in CANDIDATE_BUFFERS:
        if expected <= keys:
            return TopkPlan(keys, threads, rank)
    return EXACT
