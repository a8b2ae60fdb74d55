"""Numbers more than one kernel uses, defined once."""

from __future__ import annotations

import math

LOG2E = math.log2(math.e)  # exp(x) = exp2(x * LOG2E): softmax and GELU use the exp2 unit
LN2 = math.log(2.0)

#: bytes one thread moves per vectorized access (cp.async, ld/st.global.v4)
BYTES_PER_VEC = 16

#: shared memory a CTA may opt into on sm_90 (227 KiB), and what mbarriers and 1 KiB
#: alignment of the swizzled tiles take out of it
SM90_SMEM_BYTES = 227 * 1024
SM90_BARRIER_RESERVE = 1024
