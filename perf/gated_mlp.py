"""Fused gated up-projection vs cuBLAS + Liger and eager torch: speed and peak memory.

    python perf/gated_mlp.py [--path hopper|ampere] [--quick] [--out perf/results]

Contenders, interleaved in one run (cute_kernels.bench):
- ``cute``: ``gated_mlp_up(x, w_packed)`` — one GEMM, gated in registers, writes (M, I).
- ``cuBLAS+Liger``: one cuBLAS call over the full 2I width (a batch-2 GEMM whose output is
  ``[gate | up]`` as two contiguous (M, I) halves, so Liger reads them without copies), then
  Liger's SiLU-mul kernel (``LigerSiLUMulFunction``).
- ``torch``: eager ``x @ [W_gate; W_up]^T`` then ``silu(gate) * up``.
Shapes: Llama 3 8B / 70B / 405B (hidden -> intermediate) at 512 (chunked prefill) to 64k
tokens. Peak memory: ``torch.cuda.max_memory_allocated`` over one call that allocates its
outputs, minus what was allocated before (the inputs).
"""

from __future__ import annotations

import argparse
import datetime
import os

from cute_kernels.bench import device_name, format_table, plot_lines, save_results
from cute_kernels.suites import gated_mlp_rows, tflops

MODELS = {"8B": (4096, 14336), "70B": (8192, 28672), "405B": (16384, 53248)}
TOKENS = (512, 1024, 4096, 16384, 65536)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and rounds")
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args()
    tokens = (512, 4096, 16384) if args.quick else TOKENS
    shapes = [(m, t, h, i) for m, (h, i) in MODELS.items() for t in tokens]
    rows = gated_mlp_rows(shapes, args.path, rounds=8 if args.quick else 15, need_liger=True)
    gib = 2**30
    table = [[r.label, r.timings["cute"].median_ms, tflops(r, "cute"),
              tflops(r, "cuBLAS+Liger"), tflops(r, "torch"),
              r.timings["cuBLAS+Liger"].median_ms / r.timings["cute"].median_ms,
              r.work["peak_cute"] / gib, r.work["peak_cuBLAS+Liger"] / gib,
              r.work["peak_cute"] / r.work["peak_cuBLAS+Liger"]] for r in rows]
    commit = os.environ.get("CK_COMMIT", "unknown")
    print(f"{device_name()} | path {args.path or 'native'} | commit {commit} | "
          f"{datetime.date.today()}\n")
    print(format_table(["model tokens x hidden->I", "ms", "TFLOP/s", "cuBLAS+Liger", "torch",
                        "speedup", "peak GiB", "peak GiB (C+L)", "mem ratio"], table))
    stem = f"gated_mlp_{args.path or 'native'}"
    save_results(args.out, stem, {"device": device_name(), "commit": commit, "rows": table,
                                  "timings": rows, "date": str(datetime.date.today())})
    labels = [r.label for r in rows]
    plot_lines(f"{args.out}/{stem}.png", f"gated MLP up ({args.path or 'native'}) on "
               f"{device_name()}: TFLOP/s", labels,
               {n: [tflops(r, n) for r in rows] for n in ("cute", "cuBLAS+Liger", "torch")},
               "TFLOP/s (2 x M x K x 2I)")


if __name__ == "__main__":
    main()
