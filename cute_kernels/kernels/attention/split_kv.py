"""Split-KV attention (flash-decoding) in one host call: the attention kernel's split-KV launch,
then the combine kernel's.

The split launch writes each key range's partial O (q's dtype) and lse into ``mOParts`` /
``mLseParts`` (``n x B`` batch entries); the combine (split_combine.py) merges them into ``mO``
and ``mLSE``. Tracing both launches in one ``@cute.jit`` function makes them one compiled host
function, so a decode step pays one TVM-FFI call (~5 us of host time each) instead of two; on
sm_90 the combine is also a programmatic dependent launch of the split kernel (its ``pdl``).
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Float32


class SplitKVAttention:
    """``attention`` (an AttentionSm90 / AttentionSm80 built with ``split_kv``) then
    ``combine`` (a SplitCombine) on the same stream, from one call. Tensors: q, k, v as the
    attention kernels take them; the partials ``mOParts`` (n B, H, S_q, D), ``mLseParts``
    (n B, H, S_q) fp32; the results ``mO`` (B, H, S_q, D), ``mLSE`` (B, H, S_q) fp32."""

    def __init__(self, attention, combine):
        if not getattr(attention, "split_kv", False):
            raise ValueError("SplitKVAttention needs an attention kernel built with split_kv")
        self.attention, self.combine = attention, combine

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
                 mOParts: cute.Tensor, mLseParts: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor, scale: Float32, stream):
        self.attention(mQ, mK, mV, mOParts, mLseParts, None, None, None, None, scale, None,
                       stream)
        self.combine(mOParts, mLseParts, mO, mLSE, stream)
