"""Compare configurations of the Hopper column-sparse (gather) attention kernel in one run.

    python perf/column_sparse_tuning.py [--shape B,H,S,D] [--group 192] [--sparsity 0,0.93]
        [--configs "[dict(stages=4), dict(block_n=128, stages=2)]"] [--uneven 0.9] [--ptxas]

Each config is AttentionSm90 keyword arguments on top of the gather defaults (``gather=True``,
``block_m = group``, ``group``; ``block_n`` from ``hopper_gather_config`` unless given).
Contenders, interleaved (cute_kernels/bench.py: warm-up, medians, input sets rotated over 2x
the L2): SDPA-cuDNN and our dense attention at the full length, then each config at each
sparsity (random [group, 1] column lists, as perf/column_sparse.py). Printed per config and
sparsity: time, TFLOP/s of the attended keys, the ratio to our dense kernel and to the ideal
(dense time x (1 - p)), and the max error against the op's float32 reference on three query
groups. ``--uneven f``: each group's count drawn uniformly from (1 +- f) x the sparsity's
count (the lists as long as the largest), as masks give; ``dict(tile_order=True)`` runs the
grid longest list first (the op's ``gather_tile_order``). ``--ptxas`` (no GPU needed):
registers, spill bytes and shared memory per config.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
import tempfile

import torch
from gemm_tuning import parse_configs  # perf/ is the script's directory

CONFIGS = ("[dict(stages=2, gather_prefetch=False), dict(stages=2), dict(stages=3), "
           "dict(stages=4), dict(block_n=128, stages=2)]")


def kernel_config(head_dim: int, group: int, extra: dict) -> dict:
    from cute_kernels.tuning.attention import hopper_gather_config

    return dict(hopper_gather_config(head_dim, group), **extra)


def build(head_dim: int, group: int, extra: dict):
    from cute_kernels.ops.column_sparse import make_build

    extra = dict(extra)
    ordered = extra.pop("tile_order", False)
    return make_build("hopper", torch.bfloat16, head_dim, group, False,
                      config=kernel_config(head_dim, group, extra), ordered=ordered)


def ptxas_report(head_dim: int, group: int, configs: list[dict]) -> None:
    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.runtime.compile import compile_ptx

    ptxas = shutil.which("ptxas")
    for extra in configs:
        cfg = kernel_config(head_dim, group, extra)
        smem = AttentionSm90(head_dim, False, **cfg).smem_bytes()  # tile_order: no smem
        ptx = compile_ptx(build(head_dim, group, extra), "sm_90a")
        info = "no ptxas"
        if ptxas:
            with tempfile.TemporaryDirectory() as tmp:
                with open(f"{tmp}/k.ptx", "w") as f:
                    f.write(ptx)
                err = subprocess.run([ptxas, "-arch=sm_90a", "-v", f"{tmp}/k.ptx", "-o",
                                      f"{tmp}/k.cubin"], capture_output=True, text=True).stderr
            regs = re.findall(r"Used (\d+) registers", err)
            spills = re.findall(r"(\d+) bytes spill stores", err)
            info = f"registers {regs} spill stores {spills}"
        print(f"{extra}: smem {smem / 1024:.0f} KiB, {info}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,24,32768,128", help="B,H,S,D")
    ap.add_argument("--group", type=int, default=192)
    ap.add_argument("--sparsity", default="0,0.93")
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--uneven", type=float, default=0.0)
    ap.add_argument("--ptxas", action="store_true", help="registers/spills only (no GPU)")
    args = ap.parse_args()
    b, h, s, d = (int(v) for v in args.shape.split(","))
    configs = parse_configs(args.configs)
    if args.ptxas:
        ptxas_report(d, args.group, configs)
        return
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (or --ptxas)")

    import column_sparse
    import torch.nn.functional as F
    from column_sparse import counts_for, random_lists, spot_error
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import cute_kernels as ck
    from cute_kernels.bench import bench_interleaved, format_table, input_sets_needed
    from cute_kernels.ops.attention import attention_params
    from cute_kernels.ops.column_sparse import gather_tile_order
    from cute_kernels.ops.tile_order import snake_walks
    from cute_kernels.runtime.arch import sm_count
    from cute_kernels.runtime.compile import compile_build

    column_sparse.B, column_sparse.H, column_sparse.D = b, h, d
    column_sparse.GROUP = args.group
    g = -(-s // args.group)
    gen = torch.Generator(device="cuda").manual_seed(0)
    sets = [tuple(torch.randn(b, h, s, d, device="cuda", generator=gen).bfloat16()
                  for _ in range(3)) for _ in range(input_sets_needed(3 * b * h * s * d * 2))]
    scale = 1.0 / math.sqrt(d)
    lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
    params = attention_params()

    def cudnn(x):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*x)

    fns = {"SDPA-cuDNN": cudnn, "cute dense": lambda x: ck.attention(*x)}
    meta, errors = {}, {}
    kernels = [compile_build(build(d, args.group, extra), "sm_90a") for extra in configs]
    for p in (float(v) for v in args.sparsity.split(",")):
        count = counts_for(p, s)["exact"]
        longest = min(s, math.ceil(count * (1 + args.uneven)))
        idx, cnt = random_lists(g, s, longest, gen)
        if args.uneven:
            low = max(1, math.floor(count * (1 - args.uneven)))
            cnt = torch.randint(low, longest + 1, cnt.shape, device="cuda", generator=gen,
                                dtype=torch.int32)
            count = float(cnt.float().mean())
        for i, kern in enumerate(kernels):
            name = f"c{i} p={p}"
            meta[name] = (i, p, count)
            cfg = kernel_config(d, args.group, configs[i])
            order, ctas = None, None
            if cfg.get("tile_order") or cfg.get("persistent"):
                order = gather_tile_order(cnt, s, cfg["block_m"], args.group)
            if cfg.get("persistent"):  # the CTAs' walks, dealt from the longest-first order
                ctas = sm_count(torch.device("cuda")) * cfg.get("ctas_per_sm", 1)
                order = snake_walks(order, ctas)
                ctas = min(ctas, b * h * -(-s // cfg["block_m"]))

            def run(x, kern=kern, idx=idx, cnt=cnt, order=order, ctas=ctas):
                o = torch.empty_like(x[0])
                kern(*params.call_args(mQ=x[0], mK=x[1], mV=x[2], mO=o, mLSE=lse,
                                       mPrevLSE=None, mColsum=None, mIndices=idx, mCounts=cnt,
                                       scale=scale, out_scale=None, mTileOrder=order,
                                       num_ctas=ctas))
                return o

            fns[name] = run
            errors[name] = spot_error(*sets[0], idx, cnt, run(sets[0]))
    timings = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)
    dense = timings["cute dense"].median_ms
    rows = []
    for name, (i, p, count) in meta.items():
        t = timings[name].median_ms
        rows.append([f"c{i}", str(configs[i]), p, count, t,
                     4.0 * b * h * s * count * d / (t * 1e-3) / 1e12,
                     timings["SDPA-cuDNN"].median_ms / t, dense / t,
                     dense * count / s / t, errors[name]])
    print(f"\nB{b} H{h} S{s} D{d} group {args.group}: cuDNN "
          f"{timings['SDPA-cuDNN'].median_ms:.3f} ms, cute dense {dense:.3f} ms\n")
    print(format_table(["id", "config", "p", "count", "ms", "TFLOP/s", "vs cuDNN", "vs dense",
                        "of ideal", "max err"], rows))


if __name__ == "__main__":
    main()
