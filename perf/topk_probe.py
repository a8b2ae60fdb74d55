"""Run the top-k kernel once on a few shapes (for compute-sanitizer): python perf/topk_probe.py"""

import torch

from cute_kernels.ops.topk import topk_rows

for shape, k, dtype in (((37, 5003), 411, torch.bfloat16), ((9, 16384), 1000, torch.float32),
                        ((5, 4096), 4096, torch.float16)):
    topk_rows(torch.randn(shape, device="cuda").to(dtype), k)
torch.cuda.synchronize()
print("ok")
