"""Run column-sparse attention once (for compute-sanitizer):

    python perf/column_sparse_probe.py PATH S_Q S_KV D GROUP [accumulate]

Random unsorted key lists with duplicates, counts cycling 0, 1, 17, 191, 192, 1000 (capped at
S_kv), entries past each count out of range (never read), B = 2, H = 2 over H_kv = 1.
"""

import sys

import torch

from cute_kernels import force_path
from cute_kernels.ops.column_sparse import column_sparse_attention

path = sys.argv[1]
s_q, s_kv, d, group = (int(v) for v in sys.argv[2:6])
accumulate = len(sys.argv) > 6 and sys.argv[6] == "accumulate"
q = torch.randn(2, s_q, 2, d, device="cuda").bfloat16().transpose(1, 2)
k, v = (torch.randn(2, 1, s_kv, d, device="cuda").bfloat16() for _ in "kv")
groups = -(-s_q // group)
choices = [min(c, s_kv) for c in (0, 1, 17, 191, 192, 1000)]
counts = torch.tensor([choices[i % len(choices)] for i in range(4 * groups)], dtype=torch.int32,
                      device="cuda").view(2, 2, groups)
length = max(1, int(counts.max()))
indices = torch.randint(0, s_kv, (2, 2, groups, length), dtype=torch.int32, device="cuda")
indices = indices.masked_fill(torch.arange(length, device="cuda") >= counts[..., None], 1 << 30)
out = torch.randn_like(q) if accumulate else None
with force_path(path):
    o = column_sparse_attention(q, k, v, indices, counts, group=group, out=out,
                                accumulate=accumulate)
    # counts past the list's width and below 0 (no validate): clamped, never read past it
    wild = counts.masked_fill(counts == counts.max(), 1 << 20).masked_fill(counts == 0, -3)
    column_sparse_attention(q, k, v, indices, wild, group=group)
torch.cuda.synchronize()
print("ok", tuple(o.shape), bool(torch.isfinite(o).all()))
