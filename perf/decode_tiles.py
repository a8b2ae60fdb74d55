"""Decode attention's query tile on Hopper: 128 rows (two consumer warpgroups) against 64 (one),
side by side with the fastest SDPA backend, one run.

    python perf/decode_tiles.py [--graphs] [--s-q 1,8] [--s-kv 4096,65536] [--batch 1,16]
                                [--splits 1,8,16] [--rounds N]

``--cluster``: the 64-row tile's launches of 2-8 splits combine them in a cluster, as the op's.

A decode step packs the H / H_kv query heads of a KV head into one tile (4 x S_q rows here):
at S_q 1 or 8 a 128-row tile's second consumer warpgroup multiplies padding, and the tensor
cores it shares with the first are the SM's. Each contender is ``_attention`` on the packed
query (B, H_kv, 4 S_q, D) with ``config=dict(overlap=True, block_m=M)`` and ``num_splits=n``;
outputs are checked against the float32 reference; ``--stages`` adds deeper K/V rings for the
64-row tile. Shapes as perf/decode.py (H 32, H_kv 8,
D 128, bf16, non-causal). ``--graphs`` times CUDA-graph replays (GPU time), else eager calls.
"""

from __future__ import annotations

import argparse

import torch
from decode import (  # perf/ is the script's directory
    DEVICE,
    DTYPE,
    H_KV,
    TOLERANCE,
    D,
    H,
    graphed,
    label,
    n_sets,
    reference,
    relative_error,
    sdpa_contenders,
    set_bytes,
)

from cute_kernels.bench import bench_interleaved, format_table, input_sets_needed
from cute_kernels.kernels.attention.tiles import MAX_CLUSTER_SPLITS
from cute_kernels.ops.attention import _attention
from cute_kernels.tuning.attention import decode_rows


def ours(b: int, s_q: int, block_m: int, n: int, stages: int = 2, two_per_sm: bool = False,
         block_n: int = 128, cluster: bool = False, overlap: bool = True, swap: bool = False):
    rows = (H // H_KV) * s_q
    config = dict(overlap=overlap, block_m=block_m, stages=stages, block_n=block_n)
    if swap:  # the swap-AB decode kernel (DecodeSm90) on tiles of the packed rows
        config = dict(decode_rows=decode_rows(rows), stages=stages, block_n=block_n)
    if cluster and 2 <= n <= MAX_CLUSTER_SPLITS:  # the splits combined in a cluster
        config.update(cluster_splits=n)
    if two_per_sm:  # 64 x 64 tiles, two CTAs per SM (the short causal tiles)
        config.update(block_n=64, ctas_per_sm=2)

    def run(x):
        o, _ = _attention(x[0].reshape(b, H_KV, rows, D), x[1], x[2], False, None, n, None,
                          config)
        return o.view(b, H, s_q, D)
    return run


def vname(m: int, stages: int, two: bool = False, bn: int = 128, overlap: bool = True,
          swap: bool = False, n: int | None = None) -> str:
    return (("swapAB" if swap else f"M{m}") + ("x64c2" if two else "")
            + (f"N{bn}" if bn != 128 and not two else "")
            + (f"s{stages}" if stages != 2 else "") + ("" if overlap else "seq")
            + (f" n={n}" if n else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    ap.add_argument("--s-q", type=ints, default=[1, 8])
    ap.add_argument("--s-kv", type=ints, default=[4096, 65536])
    ap.add_argument("--batch", type=ints, default=[1, 16])
    ap.add_argument("--splits", type=ints, default=[1, 8, 16])
    ap.add_argument("--block-m", type=ints, default=[128, 64])
    ap.add_argument("--stages", type=ints, default=[2], help="K/V stages (64-row tiles only "
                    "beyond 2: the 128-row tile's smem holds 2)")
    ap.add_argument("--two-per-sm", action="store_true",
                    help="also 64 x 64 tiles at two CTAs per SM (with each --stages)")
    ap.add_argument("--cluster", action="store_true",
                    help="64-row tiles with 2-8 splits combine them in a cluster "
                         "(cluster_splits), as the op does")
    ap.add_argument("--key-tiles", default="",
                    help="also 64-row tiles with these keys per block and stages, e.g. "
                         "192x2,64x4")
    ap.add_argument("--sequential", action="store_true",
                    help="also the 64-row tile without the softmax / MMA overlap")
    ap.add_argument("--swap-ab", default="",
                    help="also the swap-AB decode kernel (DecodeSm90) with these keys per "
                         "block and stages, e.g. 128x3,64x6 (clustered with --cluster)")
    ap.add_argument("--graphs", action="store_true")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    variants = [(m, st, False, 128, True, False) for m in args.block_m for st in args.stages
                if st == 2 or m == 64]
    if args.two_per_sm:
        variants += [(64, st, True, 64, True, False) for st in args.stages]
    variants += [(64, int(st), False, int(bn), True, False)
                 for bn, st in (t.split("x") for t in args.key_tiles.split(",") if t)]
    if args.sequential:
        variants += [(64, 2, False, 128, False, False)]
    variants += [(64, int(st), False, int(bn), True, True)
                 for bn, st in (t.split("x") for t in args.swap_ab.split(",") if t)]
    rows = []
    for s_q in args.s_q:
        for s_kv in args.s_kv:
            for b in args.batch:
                per_set = set_bytes(b, s_q, s_kv)
                sets = [(torch.randn(b, H, s_q, D, device=DEVICE, dtype=DTYPE),
                         torch.randn(b, H_KV, s_kv, D, device=DEVICE, dtype=DTYPE),
                         torch.randn(b, H_KV, s_kv, D, device=DEVICE, dtype=DTYPE))
                        for _ in range(n_sets(per_set, input_sets_needed(per_set)))]
                ref = reference(*sets[0], False)
                fns = sdpa_contenders(False, s_q, s_kv)
                splits = [n for n in args.splits if n == 1 or n <= s_kv // 512]
                fns.update({vname(m, st, two, bn, ov, sw, n): ours(
                    b, s_q, m, n, st, two, bn, args.cluster and m == 64, ov, sw)
                    for m, st, two, bn, ov, sw in variants for n in splits})
                for name in list(fns):
                    try:
                        err = relative_error(fns[name](sets[0]), ref)
                    except Exception as exc:  # noqa: BLE001 (a backend that refuses the shape)
                        print(f"  skip {name}: {str(exc).splitlines()[0][:120]}")
                        del fns[name]
                        continue
                    if not err <= TOLERANCE:
                        raise SystemExit(f"{name} at {label(b, s_q, s_kv)}: error {err:.3g}")
                del ref
                if args.graphs:
                    fns = graphed(fns, sets)
                t = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)
                ms = {n: v.median_ms for n, v in t.items()}
                print(label(b, s_q, s_kv), ", ".join(f"{n} {v:.4f}" for n, v in ms.items()))
                sdpa = min(v for n, v in ms.items() if n.startswith("SDPA"))
                # a variant the kernel refused at this shape (e.g. over the smem budget): "-"
                best = {v: min(((ms[vname(*v, n)], n) for n in splits if vname(*v, n) in ms),
                               default=None) for v in variants}
                rows.append([label(b, s_q, s_kv), sdpa,
                             *(f"{best[v][0]:.4f} (n={best[v][1]})" if best[v] else "-"
                               for v in variants),
                             *(sdpa / best[v][0] if best[v] else "-" for v in variants)])
                del sets
                torch.cuda.empty_cache()
    print(f"decode tiles ({'CUDA graphs' if args.graphs else 'eager'}), ms; ratio = fastest "
          f"SDPA / ours")
    names = [vname(*v) for v in variants]
    print(format_table(["shape", "SDPA ms", *(f"{v} best" for v in names),
                        *(f"{v} x SDPA" for v in names)], rows))


if __name__ == "__main__":
    main()
