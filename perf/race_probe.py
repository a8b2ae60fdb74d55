"""Run one GEMM configuration once (for compute-sanitizer): python perf/race_probe.py TILE M N K
A_MAJOR B_MAJOR [batch] [epilogue]"""

import sys

import torch

import cute_kernels as ck
import cute_kernels.tuning.gemm as gemm_tuning

tile = tuple(int(v) for v in sys.argv[1].split(","))
m, n, k = (int(v) for v in sys.argv[2:5])
a_major, b_major = sys.argv[5], sys.argv[6]
batch = int(sys.argv[7]) if len(sys.argv) > 7 else 0
epilogue = sys.argv[8] if len(sys.argv) > 8 and sys.argv[8] != "none" else None
gemm_tuning.pick_tile = lambda *args: tile
lead = (batch,) if batch else ()
a = torch.randn(*lead, m, k, device="cuda").bfloat16()
if a_major == "m":
    a = torch.randn(*lead, k, m, device="cuda").bfloat16().transpose(-1, -2)
b = torch.randn(*lead, n, k, device="cuda").bfloat16()
if b_major == "n":
    b = torch.randn(*lead, k, n, device="cuda").bfloat16().transpose(-1, -2)
bias = torch.randn(n, device="cuda").bfloat16() if epilogue else None
out = ck.linear(a, b, bias) if not batch else ck.gemm(a, b.transpose(-1, -2))
torch.cuda.synchronize()
print("ok", tuple(out.shape))
