"""One call of a forced GEMM plan and of cuBLAS inside an NVTX range, for Nsight Compute:

    ncu --nvtx --nvtx-include "profile/" ... python perf/profile_gemm_plan.py M,N,K "dict(...)"

The dict replaces fields of the op's schedule (``perf/gemm_skinny.py forced_plan``: tile,
splits, cluster_m, cluster_n, cluster_k, max_stages, ctas); ``dict()`` is the op's own tile,
clusters and slices (with the drift limiter off and one CTA per SM or work unit, as
``forced_plan`` does).
"""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, "perf")
from gemm_skinny import forced_plan, run_plan  # noqa: E402
from gemm_tuning import parse_configs  # noqa: E402


def main() -> None:
    m, n, k = (int(v) for v in sys.argv[1].split(","))
    fields = parse_configs(f"[{sys.argv[2] if len(sys.argv) > 2 else 'dict()'}]")[0]
    x = (torch.randn(m, k, device="cuda") / 4).bfloat16()
    w = (torch.randn(n, k, device="cuda") / 4).bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    plan = forced_plan(x, w, **fields)
    run_plan(plan, x, w, out)  # compile and warm up outside the range
    torch.matmul(x, w.t(), out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profile")
    run_plan(plan, x, w, out)
    torch.matmul(x, w.t(), out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
