"""Run one attention configuration once (for compute-sanitizer):

    python perf/attention_probe.py PATH S_Q S_KV H H_KV D CAUSAL [colsum [GROUP] | splits N]
"""

import sys

import torch

import cute_kernels as ck

path = sys.argv[1]
s_q, s_kv, h, h_kv, d = (int(v) for v in sys.argv[2:7])
causal = sys.argv[7] in ("1", "true", "causal")
variant = sys.argv[8] if len(sys.argv) > 8 else ""
q = torch.randn(2, s_q, h, d, device="cuda").bfloat16().transpose(1, 2)
k = torch.randn(2, h_kv, s_kv, d, device="cuda").bfloat16()
v = torch.randn(2, h_kv, s_kv, d, device="cuda").bfloat16()
with ck.force_path(path):
    if variant == "colsum":
        prev = torch.randn(2, h, s_q, device="cuda") + 8
        group = int(sys.argv[9]) if len(sys.argv) > 9 else 192
        outs = ck.attention_colsum(q, k, v, prev, group=group)
    else:  # num_splits: the default, or N (e.g. 2-8 on Hopper: combined in clusters)
        splits = int(sys.argv[9]) if variant == "splits" else None
        outs = ck.attention(q, k, v, causal=causal, return_lse=True, num_splits=splits)
torch.cuda.synchronize()
print("ok", [tuple(t.shape) for t in outs])
