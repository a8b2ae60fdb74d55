"""Fused gated up-projection vs cuBLAS + Liger and eager torch: speed and peak memory.

    python perf/gated_mlp.py [--path hopper|ampere] [--quick] [--out perf/results]
    python perf/gated_mlp.py --tokens 1,16,64,128 --models 8B,70B --graphs   # decoding

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
import re

from cute_kernels.bench import device_name, format_table, plot_lines, save_results
from cute_kernels.suites import gated_mlp_rows, tflops

MODELS = {"8B": (4096, 14336), "70B": (8192, 28672), "405B": (16384, 53248)}
TOKENS = (512, 1024, 4096, 16384, 65536)


def forced_variants(inputs: dict, forced) -> dict:
    """One contender per forced (tile, stages, A rows): its plan made once under that
    schedule (unclustered, one CTA per tile up to the SMs; A rows: the op's choice unless
    given, 0 the whole tile), launched directly (``gated_mlp.launch``)."""
    from unittest import mock

    import torch

    from cute_kernels.kernels.common.tile_scheduler import cluster_tiles, persistent_grid
    from cute_kernels.ops import gated_mlp as gated_ops
    from cute_kernels.ops import gemm as gemm_ops
    from cute_kernels.tuning.gemm import GemmSchedule

    x, w = inputs["x"], inputs["w_packed"]
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    out = {}
    for tile, stages, a_rows in forced:
        ctas = persistent_grid(cluster_tiles(x.shape[0], w.shape[0], 1, tile, 1), sms)
        sched = GemmSchedule(tile, 1, ctas, False, max_stages=stages)
        rows = (gated_ops.gated_a_rows if a_rows is None
                else lambda *_, r=a_rows: r or None)
        with (mock.patch.object(gemm_ops, "schedule", lambda *a, sched=sched, **k: sched),
              mock.patch.object(gated_ops, "gated_a_rows", rows)):
            plan = gated_ops._plan(x, w, None, "swiglu", None)
        name = f"{'x'.join(map(str, tile))}p{stages or ''}"
        out[name + ("" if a_rows is None else f"r{a_rows}")] = (
            lambda s, plan=plan: gated_ops.launch(plan, s["x"], s["w_packed"], None, "swiglu"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and rounds")
    ap.add_argument("--out", default="perf/results")
    ap.add_argument("--tokens", default="", help="token counts, e.g. 1,16,64 (decoding)")
    ap.add_argument("--models", default=",".join(MODELS), help="subset of " + ",".join(MODELS))
    ap.add_argument("--graphs", action="store_true",
                    help="also GPU time per call in CUDA graphs (no host cost)")
    ap.add_argument("--tiles", default="",
                    help="Hopper tiles forced as extra contenders, MxNxK[pS][rR] (at most S "
                    "stages; R rows of A loaded per tile, r0 the whole tile), e.g. "
                    "64x256x64p5,64x128x128p6r0,64x128x128p6r8")
    args = ap.parse_args()
    tokens = (512, 4096, 16384) if args.quick else TOKENS
    if args.tokens:
        tokens = tuple(int(t) for t in args.tokens.split(","))
    shapes = [(m, t, *MODELS[m]) for m in args.models.split(",") for t in tokens]
    tiles = [re.fullmatch(r"(\d+)x(\d+)x(\d+)(?:p(\d+))?(?:r(\d+))?", t)
             for t in args.tiles.split(",") if t]
    if not all(tiles):
        ap.error(f"--tiles: {args.tiles!r} is not MxNxK[pS][rR],...")
    forced = [(tuple(int(v) for v in t.groups()[:3]), t.group(4) and int(t.group(4)),
               t.group(5) and int(t.group(5))) for t in tiles]
    rows = gated_mlp_rows(shapes, args.path, rounds=8 if args.quick else 15, need_liger=True,
                          graphs=args.graphs,
                          variants=(lambda s: forced_variants(s, forced)) if forced else None)
    gib = 2**30
    table = [[r.label, r.timings["cute"].median_ms, tflops(r, "cute"),
              tflops(r, "cuBLAS+Liger"), tflops(r, "torch"),
              r.timings["cuBLAS+Liger"].median_ms / r.timings["cute"].median_ms,
              r.work["peak_cute"] / gib, r.work["peak_cuBLAS+Liger"] / gib,
              r.work["peak_cute"] / r.work["peak_cuBLAS+Liger"]]
             + ([r.work["graph_cute"] * 1e3, r.work["graph_cuBLAS+Liger"] * 1e3,
                 r.work["graph_torch"] * 1e3,
                 min(r.work["graph_cuBLAS+Liger"], r.work["graph_torch"]) / r.work["graph_cute"]]
                if args.graphs else []) for r in rows]
    commit = os.environ.get("CK_COMMIT", "unknown")
    print(f"{device_name()} | path {args.path or 'native'} | commit {commit} | "
          f"{datetime.date.today()}\n")
    print(format_table(["model tokens x hidden->I", "ms", "TFLOP/s", "cuBLAS+Liger", "torch",
                        "speedup", "peak GiB", "peak GiB (C+L)", "mem ratio"]
                       + (["graph us", "C+L graph us", "torch graph us", "graph speedup"]
                          if args.graphs else []), table))
    if forced:  # the forced tiles against ours and the baselines, us eager / graph
        names = [n for n in rows[0].timings if n not in ("cute", "cuBLAS+Liger", "torch")]
        print(format_table(["shape", "ours", "C+L", *names], [
            [r.label] + [f"{r.timings[n].median_ms * 1e3:.1f}"
                         + (f" / {r.work['graph_' + n] * 1e3:.1f}" if args.graphs else "")
                         for n in ("cute", "cuBLAS+Liger", *names)] for r in rows]))
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
