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

import torch

from cute_kernels.bench import (
    Row,
    bench_interleaved,
    device_name,
    format_table,
    input_sets_needed,
    plot_lines,
    save_results,
)

MODELS = {"8B": (4096, 14336), "70B": (8192, 28672), "405B": (16384, 53248)}
TOKENS = (512, 1024, 4096, 16384, 65536)


def contenders(path):
    import torch.nn.functional as F
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    import cute_kernels as ck

    def ours(s):
        with ck.force_path(path):
            return ck.gated_mlp_up(s["x"], s["w_packed"])

    def cublas_liger(s):
        inter = s["w_cat"].shape[0] // 2
        # (2, M, I) = x @ [W_gate; W_up]^T as one strided-batched cuBLAS call (x broadcast)
        pre = torch.matmul(s["x"], s["w_cat"].view(2, inter, -1).transpose(1, 2))
        return LigerSiLUMulFunction.apply(pre[0], pre[1])

    def eager(s):
        inter = s["w_cat"].shape[0] // 2
        pre = s["x"] @ s["w_cat"].t()
        return F.silu(pre[:, :inter]) * pre[:, inter:]

    return {"cute": ours, "cuBLAS+Liger": cublas_liger, "torch": eager}


def peak_bytes(fn, inputs) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def run(shapes, path, rounds):
    import cute_kernels as ck

    fns = contenders(path)
    rows = []
    for label, tokens, hidden, inter in shapes:
        per_set = 2 * (tokens * hidden + 2 * inter * hidden)
        sets = []
        for _ in range(input_sets_needed(per_set)):
            w_gate = torch.randn(inter, hidden, device="cuda").bfloat16() / hidden ** 0.5
            w_up = torch.randn(inter, hidden, device="cuda").bfloat16() / hidden ** 0.5
            sets.append({"x": torch.randn(tokens, hidden, device="cuda").bfloat16(),
                         "w_packed": ck.pack_gated_weight(w_gate, w_up),
                         "w_cat": torch.cat([w_gate, w_up])})
            del w_gate, w_up
        check = fns["cute"](sets[0]).float()
        ref = fns["cuBLAS+Liger"](sets[0]).float()
        err = ((check - ref).norm() / ref.norm()).item()
        if err > 2e-2:
            raise SystemExit(f"{label}: ours differs from cuBLAS+Liger (rel {err:.2e})")
        del check, ref
        big = tokens * inter * hidden > 2**44
        t = bench_interleaved(fns, sets, rounds=max(4, rounds // 3) if big else rounds,
                              warmup=1 if big else 3, inner=len(sets) if big else None)
        mem = {name: peak_bytes(fn, sets[0]) for name, fn in fns.items()}
        rows.append(Row(f"{label} {tokens}x{hidden}->{inter}", t,
                        {"flops": 2.0 * tokens * hidden * 2 * inter,
                         **{f"peak_{n}": float(b) for n, b in mem.items()}}))
        del sets
        torch.cuda.empty_cache()
    return rows


def tflops(row, name):
    return row.work["flops"] / (row.timings[name].median_ms * 1e-3) / 1e12


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and rounds")
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args()
    tokens = (512, 4096, 16384) if args.quick else TOKENS
    shapes = [(m, t, h, i) for m, (h, i) in MODELS.items() for t in tokens]
    rows = run(shapes, args.path, rounds=8 if args.quick else 15)
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
