"""One call each of our GEMM and cuBLAS inside an NVTX range, for Nsight Compute:

    ncu --nvtx --nvtx-include "profile/" --metrics ... python perf/profile_gemm.py M,N,K
"""

from __future__ import annotations

import sys

import torch

import cute_kernels as ck


def main() -> None:
    m, n, k = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "8192,8192,8192").split(","))
    a = (torch.randn(m, k, device="cuda") / 4).bfloat16()
    b = (torch.randn(n, k, device="cuda") / 4).bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    ck.linear(a, b, out=out)  # compile and warm up outside the range
    torch.matmul(a, b.t(), out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profile")
    ck.linear(a, b, out=out)
    torch.matmul(a, b.t(), out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
