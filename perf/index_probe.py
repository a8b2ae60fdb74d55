"""Run the index kernels once on a few shapes (for compute-sanitizer): the top-k kernel
(kernels/topk.py: the radix select on short rows, the sampled candidates on long ones, a
constant row that overflows the candidates and falls back) and the column counts and lists
(kernels/column_lists.py: word and byte loads, rows not a multiple of the CTA's warps).

    python perf/index_probe.py
"""

import torch

from cute_kernels import pack_mask
from cute_kernels.ops.column_lists import column_counts, column_lists
from cute_kernels.ops.topk import topk_rows

for shape, k, dtype in (((37, 5003), 411, torch.bfloat16), ((9, 16384), 1000, torch.float32),
                        ((5, 4096), 4096, torch.float16), ((6, 30000), 2100, torch.float32),
                        ((3, 118784), 8315, torch.bfloat16)):
    x = torch.randn(shape, device="cuda").to(dtype)
    x[-1] = 1.0  # every key ties: the candidates overflow, the exact select runs
    topk_rows(x, k)
for rows, n in ((7, 4096), (5, 1001), (6, 40000)):
    mask = torch.rand(rows, n, device="cuda") < 0.1
    counts, _, largest = column_counts(pack_mask(mask), n, 128)
    column_lists(pack_mask(mask), counts, n, int(largest) + 17 if int(largest) + 17 <= n else n)
torch.cuda.synchronize()
print("ok")
