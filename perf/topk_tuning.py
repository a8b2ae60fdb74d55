"""Compare TopkRows configurations (kernels/topk.py) against torch.topk in one run.

    python perf/topk_tuning.py [--shapes 4104x32768,8192x16384,14856x118784]
        [--dtypes float32,bfloat16] [--share 0.07]
        [--configs "[dict(), dict(digit_bits=11), dict(digit_bits=11, hist_copies=8)]"]

Each config is TopkRows keyword arguments (``dict()`` is what the op ships for the shape:
tuning/topk.py's plan; ``candidates=0`` the plain radix select; a config with candidates
samples at the plan's rank, and runs the radix select when the plan has none). Per shape and
dtype: the median time of each config and of ``torch.topk(sorted=False)`` (cute_kernels/
bench.py: interleaved, warm-up, input sets rotated over 2x the L2), the ratio, and whether
each config's selected values equal torch.topk's as a multiset (exact top-k).
"""

from __future__ import annotations

import argparse
import sys

import torch
from gemm_tuning import parse_configs  # perf/ is the script's directory

CONFIGS = ("[dict(), dict(candidates=0), dict(candidates=16384), "
           "dict(candidates=16384, threads=1024)]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4104x32768,8192x16384,14856x118784")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--share", type=float, default=0.07, help="k / N")
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    from cute_kernels.bench import bench_interleaved, format_table, input_sets_needed
    from cute_kernels.ops.topk import TOPK_KERNEL, make_build, vector_width
    from cute_kernels.runtime.compile import compile_build
    from cute_kernels.runtime.launch import kernel_params
    from cute_kernels.tuning.topk import topk_plan

    configs = parse_configs(args.configs)
    params = kernel_params(TOPK_KERNEL)
    rows = []
    for shape in args.shapes.split(","):
        r, n = (int(x) for x in shape.split("x"))
        k = max(1, round(args.share * n))
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            sets = [torch.randn(r, n, device="cuda").to(dtype)
                    for _ in range(input_sets_needed(r * n * dtype.itemsize))]
            vec = vector_width(sets[0])
            out = torch.empty(r, k, dtype=torch.int32, device="cuda")
            fns = {"torch.topk": lambda x, k=k: x.topk(k, dim=1, sorted=False)}
            exact = {}
            plan = topk_plan(n, k)
            for i, cfg in enumerate(configs):
                if not cfg:  # the shipped plan
                    cfg = {"candidates": plan.candidates, "threads": plan.threads}
                rank = plan.sample_rank if cfg.get("candidates") else 0
                kern = compile_build(make_build(dtype, vec, **cfg), "sm_90a"
                                     if torch.cuda.get_device_capability() == (9, 0) else "sm_80")

                def run(x, kern=kern, out=out, k=k, rank=rank):
                    kern(*params.call_args(mScores=x, mIndices=out, k=k, sample_rank=rank))
                    return out

                fns[f"c{i}"] = run
                got = run(sets[0]).long()
                want = sets[0].float().topk(k, dim=1).values.sort(1).values
                exact[f"c{i}"] = bool(torch.equal(
                    sets[0].float().gather(1, got).sort(1).values, want))
            t = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)
            base = t["torch.topk"].median_ms
            for i, cfg in enumerate(configs):
                ms = t[f"c{i}"].median_ms
                rows.append([shape, str(dtype).split(".")[-1], f"c{i}", str(cfg), ms, base,
                             base / ms, exact[f"c{i}"]])
    print(format_table(["scores", "dtype", "id", "config", "ms", "torch.topk ms",
                        "vs torch.topk", "exact"], rows))


if __name__ == "__main__":
    main()
