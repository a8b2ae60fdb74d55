"""Flash attention forward vs SDPA (cuDNN and flash backends) and FlexAttention, one run.

    python perf/attention.py [--path hopper|ampere] [--quick] [--out perf/results]
        [--d 128] [--s 1024,2048] [--no-flex]

TFLOP/s = 4 * B * H * S_q * S_kv * D / time, halved for causal. Shapes: D = 64 / 128, S = 1k..32k
(B * S = 32k tokens, H * D = 2048), causal and not, and the video-diffusion shape B = 1, H = 24,
S = 118784, D = 128 (non-causal). Layout (B, H, S, D) bf16.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.nn.functional as F

import cute_kernels as ck
from cute_kernels.bench import (
    Row,
    bench_interleaved,
    device_name,
    format_table,
    input_sets_needed,
    plot_lines,
    save_results,
)


def shapes(quick: bool, dims=(64, 128), lengths=None):
    """(B, H, S, D, causal) rows; ``dims`` / ``lengths`` keep a subset (the video shape only
    when every length is run)."""
    out = []
    for d in dims:
        default = (4096, 16384) if quick else (1024, 2048, 4096, 8192, 16384, 32768)
        for s in lengths or default:
            for causal in (False, True):
                out.append((max(1, 32768 // s), 2048 // d, s, d, causal))
    if 128 in dims and lengths is None:
        out.append((1, 24, 118784 if not quick else 32768, 128, False))
    return out


def contenders(path, causal, flex_on=True):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from cute_kernels import attention, attention_colsum, force_path

    torch._dynamo.reset()  # one compiled FlexAttention per shape (no recompile-limit fallback)
    flex = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def ours(s):
        with force_path(path):
            return attention(s[0], s[1], s[2], causal=causal)

    def sdpa(backend):
        def run(s):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=causal)
        return run

    def flex_run(s):
        seq = s[0].shape[2]
        if causal and seq not in masks:
            masks[seq] = create_block_mask(lambda b, h, q, k: q >= k, None, None, seq, seq)
        return flex(s[0], s[1], s[2], block_mask=masks.get(seq) if causal else None)

    def ours_colsum(s):  # s[3]: the previous step's lse (this step's, computed once)
        with force_path(path):
            return attention_colsum(s[0], s[1], s[2], s[3])

    extra = {} if causal else {"cute-colsum": ours_colsum}
    return {"cute": ours, **extra, "SDPA-cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION),
            "SDPA-flash": sdpa(SDPBackend.FLASH_ATTENTION),
            **({"FlexAttention": flex_run} if flex_on else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="perf/results")
    ap.add_argument("--d", default="64,128", help="head dims, comma-separated")
    ap.add_argument("--s", default=None, help="sequence lengths, comma-separated")
    ap.add_argument("--no-flex", action="store_true", help="leave FlexAttention out (its "
                    "compile per shape dominates a short run)")
    args = ap.parse_args()
    dims = tuple(int(x) for x in args.d.split(","))
    lengths = tuple(int(x) for x in args.s.split(",")) if args.s else None
    rows = []
    for b, h, s, d, causal in shapes(args.quick, dims, lengths):
        per_set = 3 * b * h * s * d * 2
        sets = [tuple(torch.randn(b, h, s, d, device="cuda").bfloat16() for _ in range(3))
                for _ in range(input_sets_needed(per_set))]
        if not causal:  # the column-sum variant's prev_lse: this step's own lse
            sets = [(*st, ck.attention(*st, return_lse=True)[1]) for st in sets]
        fns = contenders(args.path, causal, not args.no_flex)
        for name in list(fns):  # a backend that cannot run this shape is left out, not fatal
            try:
                fns[name](sets[0])
            except (RuntimeError, ValueError) as err:
                print(f"skip {name} at {b}x{h}x{s}x{d}: {str(err).splitlines()[0]}")
                del fns[name]
        flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
        big = flops > 2e13
        t = bench_interleaved(fns, sets, rounds=6 if big else 15, warmup=1 if big else 3)
        rows.append(Row(f"B{b} H{h} S{s} D{d}{' causal' if causal else ''}", t,
                        {"flops": flops}))
        del sets
        torch.cuda.empty_cache()

    def tf(r, n):
        return r.work["flops"] / (r.timings[n].median_ms * 1e-3) / 1e12 if n in r.timings \
            else float("nan")

    def colsum_cost(r):  # colsum time / plain time (bar: <= 1.3)
        return r.timings["cute-colsum"].median_ms / r.timings["cute"].median_ms \
            if "cute-colsum" in r.timings else float("nan")

    names = ["cute", "SDPA-cuDNN", "SDPA-flash", "FlexAttention"]
    table = [[r.label, r.timings["cute"].median_ms, *(tf(r, n) for n in names),
              tf(r, "cute") / tf(r, "SDPA-cuDNN"), tf(r, "cute") / tf(r, "SDPA-flash"),
              colsum_cost(r)] for r in rows]
    commit = os.environ.get("CK_COMMIT", "unknown")
    print(f"{device_name()} | path {args.path or 'native'} | commit {commit} | "
          f"{datetime.date.today()}\n")
    print(format_table(["shape", "ms", "TFLOP/s", "cuDNN", "flash", "Flex",
                        "vs cuDNN", "vs flash", "colsum/plain"], table))
    stem = f"attention_{args.path or 'native'}"
    if args.d != "64,128" or args.s:  # a subset run: its own files
        stem += f"_d{args.d.replace(',', '-')}" + (f"_s{args.s.replace(',', '-')}" if args.s
                                                    else "")
    save_results(args.out, stem, {"device": device_name(), "commit": commit, "rows": table,
                                  "timings": rows, "date": str(datetime.date.today())})
    plot_lines(f"{args.out}/{stem}.png", f"attention forward ({args.path or 'native'}) on "
               f"{device_name()}", [r.label for r in rows],
               {n: [tf(r, n) for r in rows] for n in names}, "TFLOP/s")


if __name__ == "__main__":
    main()
