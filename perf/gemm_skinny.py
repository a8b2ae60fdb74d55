"""Small and skinny GEMMs (issue 17's sweep): ``linear`` vs cuBLAS, interleaved in one run.

    python perf/gemm_skinny.py [--quick] [--variants] [--out perf/results]

Sweep: M in {1, 8, 13, 64, 128, 512, 1024} against N x K in {14336 x 4096, 4096 x 14336,
28672 x 8192}, the squares 1024^3-4096^3 and 3000 x 5000 x 3072 (bf16, x (M, K) @ w (N, K)^T,
``out=`` given, as a server calls it). Ours is the op's default schedule (printed: tile, swap-AB,
split-K). ``--variants`` also times, for M <= 128, forced schedules: the default's swap choice with
1/2/4/8 K slices, and the plain (unswapped, unsplit) kernel, beside cuBLAS in the same loop.
``--graphs`` times every contender also inside a CUDA graph (GPU time without host cost). Host
µs/call (no sync, plan cached) is printed for both. Writes JSON + a PNG of the ratios.
"""

from __future__ import annotations

import argparse
import datetime
import re
from functools import partial

import torch

import cute_kernels as ck
import cute_kernels.ops.gemm as gemm_ops
import cute_kernels.tuning.gemm as gemm_tuning
from cute_kernels.bench import (
    bench_interleaved,
    commit_id,
    device_name,
    format_table,
    graph_ms,
    host_us,
    input_sets_needed,
    plot_lines,
    save_results,
)

NK = ((14336, 4096), (4096, 14336), (28672, 8192))
SWEEP = ([(m, n, k) for n, k in NK for m in (1, 8, 13, 64, 128, 512, 1024)]
         + [(s, s, s) for s in (1024, 2048, 3072, 4096)] + [(3000, 5000, 3072)])
QUICK = [(13, 14336, 4096), (1, 4096, 14336), (64, 28672, 8192), (128, 4096, 14336),
         (1024, 14336, 4096), (1024, 1024, 1024), (2048, 2048, 2048)]


def forced_plan(x, w, **fields):
    """The plan ``linear(x, w)`` would make under a schedule with ``fields`` replaced
    (``skinny=False``: the unswapped, unsplit schedule)."""
    real = gemm_tuning.schedule

    def schedule(m, n, k, batch, sms, skinny=True, cluster_split=True, gated=False):
        if gated or fields.get("skinny", True) is False:
            return real(m, n, k, batch, sms, skinny=False, gated=gated)
        base = real(m, n, k, batch, sms)
        if "cluster_k" not in fields and ("splits" in fields or fields.get("swap")):
            base = base._replace(cluster_k=1)  # workspace slices / swap-AB: no pairs along K
        s = base._replace(**{"stream_k": False, **fields})  # stream-K only when asked
        # pingpong as the default's on the default's own tile (PINGPONG_TILES), unshared and
        # unsplit; else only when asked
        if "pingpong" not in fields and (s.tile != base.tile or s.stream_k or s.skinny
                                         or s.cluster_k > 1):
            s = s._replace(pingpong=False)
        # the default's dependent launch only where the launch is the default's (the rule
        # that gave it depends on the tile and the waves); else only when asked
        same = all(getattr(s, f) == getattr(base, f)
                   for f in ("tile", "cluster_m", "cluster_n", "cluster_k", "swap", "splits",
                             "pingpong"))
        if "pdl" not in fields and not same:
            s = s._replace(pdl=False)
        rows, cols = (n, m) if s.swap else (m, n)
        tiles_m, tiles_n = -(-rows // s.tile[0]), -(-cols // s.tile[1])
        units = -(-tiles_m // s.cluster_m) * -(-tiles_n // s.cluster_n)
        size = s.cluster_m * s.cluster_n * s.cluster_k  # CTAs per cluster
        # stream-K may share tiles among more CTAs than there are tiles
        cap = sms if s.stream_k else units * s.splits * size
        ctas = min(fields.get("ctas") or sms, cap) // size * size
        return s._replace(ctas=ctas, drift=fields.get("drift", False))

    gemm_tuning.schedule = schedule
    try:
        return gemm_ops._plan(x, w, None, None, x.dtype, None, "x", "w")
    finally:
        gemm_tuning.schedule = real


def run_plan(plan, x, w, out):
    return gemm_ops.launch(plan, x, w, None, out)


def graph_us(fn, sets, inner: int = 20, reps: int = 15) -> float:
    """GPU µs per call from a CUDA graph of ``inner`` calls (``bench.graph_ms``)."""
    return graph_ms(fn, sets, inner=inner, reps=reps) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--graphs", action="store_true")
    ap.add_argument("--tiles", default="",
                    help="tiles (K slices s through the workspace or k in a cluster, at most "
                    "p stages, cluster c) to force as variants, e.g. 128x224x64,64x128x64s4,"
                    "128x128x64k4,128x64x64p8c1, cluster n along N: 128x64x64p8c1n2, at most "
                    "g CTAs: 128x128x64c2n2g128; a leading w: swapped (decode shapes), "
                    "w64x16x128s1; z1 / z0: stream-K on / off, 128x256x64z1; d1 / d0: a "
                    "programmatic dependent launch on / off (plain, swapped-direct and "
                    "cluster-split launches; the workspace route ignores it); l1: the wave "
                    "drift limiter on (whole tiles; off otherwise); q1 / q0: pingpong consumers "
                    "(a tile per consumer warpgroup) on / off (unset: the default's on its own "
                    "tile, else off)")
    ap.add_argument("--shapes", default="", help="MxNxK,... instead of the sweep")
    ap.add_argument("--kvariants", default="128:6",
                    help="swapped variants as k-tile:max-stages,... (with --variants)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args()
    shapes = QUICK if args.quick else SWEEP
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    # "MxNxK" or "MxNxKsS" (S K slices), "...pP" (at most P pipeline stages), "...cC" (clusters
    # of C along M), "...nN" (N CTAs along N); a leading "w": a swapped variant (M <= SWAP_MAX_M)
    tiles = []
    for t in (t for t in args.tiles.split(",") if t):
        spec = re.fullmatch(
            r"(w?)(\d+)x(\d+)x(\d+)(?:s(\d+))?(?:k(\d+))?(?:p(\d+))?(?:c(\d+))?(?:n(\d+))?(?:g(\d+))?"
            r"(?:z([01]))?(?:d([01]))?(?:l(1))?(?:q([01]))?",
            t)
        if spec is None:
            ap.error(f"--tiles: {t!r} is not "
                     f"[w]MxNxK[sS][kK][pP][cC][nN][gG][zZ][dD][l1][qQ]")
        (swap, tm, tn, tk, splits, cluster_k, stages, cluster, cluster_n, ctas, sk,
         pdl, drift, pingpong) = spec.groups()
        tiles.append(((int(tm), int(tn), int(tk)), int(splits or 1), swap == "w",
                      int(cluster) if cluster else None, int(stages) if stages else None,
                      int(cluster_k or 1), int(cluster_n or 1), int(ctas) if ctas else None,
                      None if sk is None else sk == "1", None if pdl is None else pdl == "1",
                      drift == "1", None if pingpong is None else pingpong == "1"))
    kvariants = [tuple(int(v) for v in t.split(":")) for t in args.kvariants.split(",") if t]
    rows, table, variant_table = [], [], []
    for m, n, k in shapes:
        sets = [((torch.randn(m, k, device="cuda") / 4).bfloat16(),
                 (torch.randn(n, k, device="cuda") / 4).bfloat16())
                for _ in range(input_sets_needed(2 * (m * k + n * k + m * n)))]
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        contenders = {"cute": lambda s, out=out: ck.linear(s[0], s[1], out=out),
                      "cuBLAS": lambda s, out=out: torch.matmul(s[0], s[1].t(), out=out)}
        variants = {}
        for (tile, splits, swap, cluster, stages, cluster_k, cluster_n, ctas, sk, pdl,
             drift, pingpong) in tiles:
            if (swap == (m <= gemm_tuning.SWAP_MAX_M)
                    and splits in gemm_tuning.split_options(k)):
                extra = {"cluster_k": cluster_k, "cluster_n": cluster_n,
                         **({"ctas": ctas} if ctas else {}),
                         **({} if sk is None else {"stream_k": sk}),
                         **({} if pdl is None else {"pdl": pdl}),
                         **({"drift": True} if drift else {}),
                         **({} if pingpong is None else {"pingpong": pingpong})}
                if cluster_k > 1:  # split-K in a cluster: no CTAs paired along M
                    extra["cluster_m"] = 1
                elif cluster is not None:
                    extra["cluster_m"] = cluster
                if stages is None and swap:
                    stages = gemm_tuning.SWAP_MAX_STAGES
                variants[f"{'swap ' if swap else ''}tile {'x'.join(map(str, tile))} "
                         f"s{splits}{f' k{cluster_k}' if cluster_k > 1 else ''}"
                         f"{'' if stages is None else f' p{stages}'}"
                         f"{'' if cluster is None else f' c{cluster}'}"
                         f"{'' if cluster_n == 1 else f' n{cluster_n}'}"
                         f"{'' if ctas is None else f' g{ctas}'}"
                         f"{'' if sk is None else f' z{int(sk)}'}"
                         f"{'' if pdl is None else f' d{int(pdl)}'}"
                         f"{' l1' if drift else ''}"
                         f"{'' if pingpong is None else f' q{int(pingpong)}'}"] = forced_plan(
                    sets[0][0], sets[0][1], tile=tile, splits=splits, swap=swap,
                    max_stages=stages, **extra)
        if args.variants and m <= 128:
            x0, w0 = sets[0]
            swapped = m <= gemm_tuning.SWAP_MAX_M
            variants["plain"] = forced_plan(x0, w0, skinny=False)
            base = gemm_ops.schedule(x0, w0)
            for splits in (1, 2, 4, 8):
                if splits in gemm_tuning.split_options(k) and (swapped or splits > 1):
                    name = f"{'swap ' if swapped else ''}s{splits}"
                    variants[name] = forced_plan(x0, w0, splits=splits)
                    if swapped and splits == base.splits:  # deeper k-tiles / more stages
                        for bk, stages in kvariants:
                            variants[f"{name} k{bk}x{stages}"] = forced_plan(
                                x0, w0, splits=splits, tile=(*base.tile[:2], bk),
                                max_stages=stages)
        for name, plan in variants.items():
            contenders[name] = lambda s, plan=plan, out=out: run_plan(plan, s[0], s[1], out)
        t = bench_interleaved(contenders, sets, rounds=args.rounds)
        # correctness of every contender on the last set (fp32 reference)
        x, w = sets[0]
        ref = x.float() @ w.float().t()
        for name, fn in contenders.items():
            out.fill_(float("nan"))
            fn(sets[0])
            err = ((out.float() - ref).norm() / ref.norm()).item()
            assert err < 2e-2, f"{m}x{n}x{k} {name}: rel err {err:.3g}"
        desc = gemm_ops.schedule(x, w).describe()
        flops = 2.0 * m * n * k
        ours, theirs = t["cute"].median_ms, t["cuBLAS"].median_ms
        small = theirs < 0.2  # host time matters (and is measurable without a deep queue)
        h_ours = (host_us(partial(ck.linear, x, w, out=out), 200, warmup=10) if small
                  else float("nan"))
        h_cublas = (host_us(partial(torch.matmul, x, w.t(), out=out), 200, warmup=10) if small
                    else float("nan"))
        row = [f"{m}x{n}x{k}", ours * 1e3, theirs * 1e3, theirs / ours, flops / ours / 1e9,
               h_ours, h_cublas]
        if args.graphs:
            g_ours, g_cublas = graph_us(contenders["cute"], sets), graph_us(contenders["cuBLAS"],
                                                                            sets)
            row += [g_ours, g_cublas, g_cublas / g_ours]
            for name in variants:
                t[name].graph_us = graph_us(contenders[name], sets)
        table.append(row + [desc])
        rows.append({"shape": (m, n, k), "timings": t, "schedule": desc})
        if variants:
            variant_table.append([f"{m}x{n}x{k}", f"cuBLAS {theirs * 1e3:.1f}"]
                                 + [f"| {name} {t[name].median_ms * 1e3:.1f} "
                                    f"({theirs / t[name].median_ms:.2f}x)"
                                    + (f" graph {t[name].graph_us:.1f}" if args.graphs else "")
                                    for name in variants])
    commit = commit_id()
    print(f"{device_name()} | commit {commit} | {datetime.date.today()}\n")
    graph_cols = ["graph us", "cuBLAS graph us", "graph ratio"] if args.graphs else []
    print(format_table(["MxNxK", "ours us", "cuBLAS us", "ratio", "TFLOP/s", "host us",
                        "cuBLAS host us", *graph_cols, "schedule"], table))
    if variant_table:
        print("\nforced schedules (us, ratio to cuBLAS):")
        for row in variant_table:
            print("  ".join(str(c) for c in row))
    ratios = [r[3] for r in table]
    print(f"\nmin ratio {min(ratios):.3f} at {table[ratios.index(min(ratios))][0]}; "
          f"shapes >= 0.95x: {sum(r >= 0.95 for r in ratios)}/{len(ratios)}")
    save_results(args.out, "gemm_skinny", {"device": device_name(), "commit": commit,
                                           "date": str(datetime.date.today()), "rows": table,
                                           "variants": variant_table, "timings": rows})
    plot_lines(f"{args.out}/gemm_skinny.png", f"small / skinny GEMM on {device_name()}",
               [r[0] for r in table], {"ours / cuBLAS": ratios}, "speed ratio",
               hline=("0.95", 0.95))


if __name__ == "__main__":
    main()
