"""Dense GEMM (``linear``: x (M, K) @ w (N, K)^T, bf16) vs torch.matmul (cuBLAS), one run.

    python perf/gemm.py [--path hopper|ampere] [--quick] [--out perf/results]

Squares 1024..16384 and the Llama MLP shapes (tokens x {4096->14336, 8192->28672,
16384->53248} and the down projections). Prints TFLOP/s and the ratio; writes JSON + PNG.
"""

from __future__ import annotations

import argparse
import datetime

from cute_kernels.bench import device_name, format_table, plot_lines, save_results
from cute_kernels.suites import gemm_rows, tflops

SQUARES = [(s, s, s) for s in (1024, 2048, 4096, 8192, 16384)]
LLAMA = [(t, i, h) for h, i in ((4096, 14336), (8192, 28672), (16384, 53248))
         for t in (1024, 4096, 16384, 65536)]
LLAMA += [(t, h, i) for h, i in ((4096, 14336), (8192, 28672)) for t in (4096, 16384)]


def main() -> None:
    import os

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args()
    shapes = ([(8192, 8192, 8192), (4096, 14336, 4096), (16384, 28672, 8192), (4096, 4096, 14336)]
              if args.quick else SQUARES + LLAMA)
    from cute_kernels.runtime.compile import KERNELS

    rows = gemm_rows(shapes, path=args.path, rounds=8 if args.quick else 15)
    compiled = (KERNELS.stats["compiles"], KERNELS.stats["compile_s"], KERNELS.stats["disk_hits"])
    table = [[r.label, r.timings["cute"].median_ms, tflops(r, "cute"), tflops(r, "cuBLAS"),
              tflops(r, "cute") / tflops(r, "cuBLAS")] for r in rows]
    commit = os.environ.get("CK_COMMIT", "unknown")
    print(f"{device_name()} | path {args.path or 'native'} | commit {commit} | "
          f"{datetime.date.today()}\n")
    print(format_table(["MxNxK", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "ratio"], table))
    print(f"kernels compiled: {compiled[0]} in {compiled[1]:.1f} s; "
          f"loaded from disk: {compiled[2]}")
    stem = f"gemm_{args.path or 'native'}"
    save_results(args.out, stem, {"device": device_name(), "commit": commit, "rows": table,
                                  "timings": rows, "date": str(datetime.date.today())})
    plot_lines(f"{args.out}/{stem}.png", f"GEMM ({args.path or 'native'}) on {device_name()}",
               [r.label for r in rows], {"cute-kernels": [tflops(r, "cute") for r in rows],
                                         "cuBLAS": [tflops(r, "cuBLAS") for r in rows]},
               "TFLOP/s")


if __name__ == "__main__":
    main()
