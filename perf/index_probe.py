"""Run the index kernels once on a few shapes (for compute-sanitizer): the top-k radix
select (kernels/topk.py) and the column lists (kernels/column_lists.py).

    python perf/index_probe.py
"""

import torch

from cute_kernels import pack_mask
from cute_kernels.ops.column_lists import column_lists
from cute_kernels.ops.topk import topk_rows

for shape, k, dtype in (((37, 5003), 411, torch.bfloat16), ((9, 16384), 1000, torch.float32),
                        ((5, 4096), 4096, torch.float16)):
    topk_rows(torch.randn(shape, device="cuda").to(dtype), k)
for rows, n in ((7, 4096), (5, 1001)):
    mask = torch.rand(rows, n, device="cuda") < 0.1
    counts = mask.sum(1).to(torch.int32)
    column_lists(pack_mask(mask), counts, n, int(counts.max()) + 17)
torch.cuda.synchronize()
print("ok")
