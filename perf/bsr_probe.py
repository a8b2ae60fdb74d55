"""Run the three BCSR stages once per block size, on both paths' kernels (for compute-sanitizer):
python perf/bsr_probe.py [hopper|ampere]"""

import sys
import warnings

import torch

import cute_kernels as ck
from cute_kernels.ops import bsr as bsr_ops
from cute_kernels.ops.bsr import bsr_sddmm, bsr_softmax, bsr_spmm

warnings.filterwarnings("ignore", "Sparse BSR tensor support is in beta")
path = sys.argv[1] if len(sys.argv) > 1 else None
with ck.force_path(path):
    for g in (16, 32, 64, 128):
        n, d = 4 * g, 128
        on = torch.rand(2, 4, 4, device="cuda") < 0.5
        on[..., 0] = True
        on[1] = on[0]  # batched BSR: one pattern (an equal count) per batch entry
        dense = on.repeat_interleave(g, -2).repeat_interleave(g, -1)
        layout = (torch.randn(dense.shape, device="cuda") * dense).bfloat16().to_sparse_bsr(
            (g, g))
        q, k, v = (torch.randn(2, n, d, device="cuda").bfloat16() for _ in "qkv")
        bsr_spmm(bsr_softmax(bsr_sddmm(q, k, layout)), v)
        bsr_ops.SDDMM_CHUNKED = not bsr_ops.SDDMM_CHUNKED  # the other SDDMM kernel too
        bsr_sddmm(q, k, layout)
        bsr_ops.SDDMM_CHUNKED = not bsr_ops.SDDMM_CHUNKED
        # bad columns without debug mode: clamped, never an out-of-bounds access
        bad = torch.sparse_bsr_tensor(layout.crow_indices(), layout.col_indices() + 9,
                                      layout.values(), size=layout.shape, check_invariants=False)
        bsr_spmm(bsr_softmax(bsr_sddmm(q, k, bad)), v)
torch.cuda.synchronize()
print("ok")
