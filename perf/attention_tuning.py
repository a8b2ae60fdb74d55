"""Compare configurations of the Hopper attention kernel against SDPA-cuDNN in one run.

    python perf/attention_tuning.py [--shape B,H,S,D] [--causal] [--path ampere]
        [--configs "[dict(block_m=128, block_n=176, overlap=True)]"]

Each config is AttentionSm90's keyword arguments, or with ``--path ampere`` AttentionSm80's
(built for the Hopper GPU it runs on, timed against SDPA's flash backend, FlashAttention-2:
the Ampere path's bar; plain attention only). persistent=True runs through the op, which
builds the tile order; colsum=True times the column-sum variant with
prev_lse = this step's lse, group=192 unless given; a variant that adds its sums onto zeros
pays for the zeroing in its time, as ``attention_colsum`` does). The error column is o's
relative error against SDPA's output.
"""

from __future__ import annotations

import argparse
import math

import cutlass
import torch
import torch.nn.functional as F
from gemm_tuning import parse_configs  # perf/ is the script's directory

from cute_kernels.bench import bench_interleaved, format_table, input_sets_needed
from cute_kernels.kernels.attention.sm80 import AttentionSm80
from cute_kernels.kernels.attention.sm90 import AttentionSm90
from cute_kernels.ops.attention import _attention, make_build
from cute_kernels.runtime.compile import Build, compile_build

CONFIGS = ("[dict(), dict(overlap=True), dict(block_m=192), "
           "dict(colsum=True, overlap=True), dict(colsum=True, overlap=True, group=128), "
           "dict(colsum=True, block_m=192, colsum_method='shuffle'), "
           "dict(colsum=True, block_m=192, group=128)]")
AMPERE_CONFIGS = ("[dict(), dict(warps=4), dict(block_n=32, warps=4), dict(block_m=64, warps=4), "
                  "dict(block_m=256, block_n=32, warps=8)]")


def colsum_error(st, prev_lse, colsum, scale, group=192):
    """Max relative error of two heads' column sums against fp32 torch math."""
    worst = 0.0
    for b, h in ((0, 0), (-1, -1)):
        q, k = st[0][b, h].float(), st[1][b, h].float()
        p = torch.exp(q @ k.t() * scale - prev_lse[b, h][:, None])
        pad = -q.shape[0] % group
        ref = torch.nn.functional.pad(p, (0, 0, 0, pad)).view(-1, group, k.shape[0]).sum(1)
        worst = max(worst, ((colsum[b, h] - ref).abs() / ref.abs().clamp_min(1e-6)).max().item())
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="2,16,16384,128", help="B,H,S,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--path", choices=("hopper", "ampere"), default="hopper")
    args = ap.parse_args()
    ampere = args.path == "ampere"
    if ampere and args.configs == CONFIGS:
        args.configs = AMPERE_CONFIGS
    b, h, s, d = (int(v) for v in args.shape.split(","))
    sets = [tuple(torch.randn(b, h, s, d, device="cuda").bfloat16() for _ in range(3))
            for _ in range(input_sets_needed(3 * b * h * s * d * 2))]
    scale = 1.0 / math.sqrt(d)
    o = torch.empty(b, h, s, d, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
    colsums = {g: torch.empty(b, h, -(-s // g), s, dtype=torch.float32, device="cuda")
               for g in (128, 192)}
    ref = F.scaled_dot_product_attention(*sets[0], is_causal=args.causal).float()
    fake = make_build("hopper", torch.bfloat16, d, False, colsum=True).args
    plain_fake = make_build(args.path, torch.bfloat16, d, args.causal).args
    fns, errs, prev, col_errs = {}, {}, {}, {}
    for cfg in parse_configs(args.configs):
        name = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        try:
            if ampere:  # one fake argument list for every AttentionSm80 configuration
                kern, fake_args = AttentionSm80(d, args.causal, **cfg), plain_fake
            else:
                kern = AttentionSm90(d, args.causal, **cfg)
                fake_args = (fake if cfg.get("colsum") else make_build(
                    "hopper", torch.bfloat16, d, args.causal, config=cfg).args)
            fn = compile_build(Build(kern, fake_args), "sm_90a")  # the GPU is a Hopper
        except Exception as err:  # report and go on: a config may not fit
            print(f"skip {name}: {str(err).splitlines()[0][:100]}")
            continue
        if cfg.get("colsum"):
            if not prev:  # prev_lse per input set: that set's own lse, from the plain kernel
                plain = compile_build(Build(AttentionSm90(d, False), plain_fake), "sm_90a")
                for st in sets:
                    plain(*st, o, lse, None, None, None, None, scale, None)
                    prev[id(st[0])] = lse.clone()

            colsum = colsums[kern.group]

            def run(st, fn=fn, colsum=colsum, zero=kern.colsum_atomic):
                if zero:
                    colsum.zero_()
                fn(*st, o, lse, prev[id(st[0])], colsum, None, None, scale, None)
        elif cfg.get("persistent"):
            # through the op: it builds the tile order and sizes the grid
            def run(st, cfg=cfg):
                _attention(*st, args.causal, scale, 1, o, cfg)
        else:
            def run(st, fn=fn):
                fn(*st, o, lse, None, None, None, None, scale, None)
        o.fill_(float("nan"))
        for c in colsums.values():
            c.fill_(float("nan"))
        run(sets[0])
        errs[name] = ((o.float() - ref).norm() / ref.norm()).item()
        if cfg.get("colsum"):
            col_errs[name] = colsum_error(sets[0], prev[id(sets[0][0])], colsums[kern.group],
                                          scale, kern.group)
        fns[name] = run
    backend = "flash" if ampere else "cuDNN"
    fns[f"SDPA-{backend}"] = lambda st: F.scaled_dot_product_attention(*st,
                                                                       is_causal=args.causal)
    sdpa = torch.nn.attention.SDPBackend
    with torch.nn.attention.sdpa_kernel(sdpa.FLASH_ATTENTION if ampere else
                                        sdpa.CUDNN_ATTENTION):
        t = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)
    flops = 4.0 * b * h * s * s * d / (2 if args.causal else 1)
    base = t[f"SDPA-{backend}"].median_ms
    rows = [[n, v.median_ms, flops / v.median_ms / 1e9, base / v.median_ms,
             f"{errs.get(n, 0.0):.1e}", f"{col_errs[n]:.1e}" if n in col_errs else ""]
            for n, v in t.items()]
    print(f"{args.path} B{b} H{h} S{s} D{d}{' causal' if args.causal else ''} "
          f"(cutlass-dsl {cutlass.__version__})")
    print(format_table(["config", "ms", "TFLOP/s", f"vs {backend}", "err vs SDPA",
                        "colsum err"], rows))


if __name__ == "__main__":
    main()
