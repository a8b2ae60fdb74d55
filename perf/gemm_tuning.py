"""Compare configurations of one GEMM kernel against cuBLAS in one run (linear form, bf16).

    python perf/gemm_tuning.py [--path ampere|hopper] [--shape 8192,8192,8192]
                               [--configs "[dict(tile=(128, 256, 64), cluster_m=2)]"]
"""

from __future__ import annotations

import argparse
import ast

import cutlass
import torch
from cutlass.cute.runtime import make_fake_compact_tensor

from cute_kernels.bench import bench_interleaved, format_table
from cute_kernels.kernels.common.tile_scheduler import persistent_grid
from cute_kernels.kernels.gemm.epilogue import Epilogue
from cute_kernels.runtime.arch import device_target
from cute_kernels.runtime.bridge import env_stream, fake_mkl
from cute_kernels.runtime.compile import Build, compile_build

CONFIGS = {
    "ampere": [dict(tile=(128, 128, 32), stages=3), dict(tile=(128, 128, 64), stages=3),
               dict(tile=(128, 128, 32), stages=4)],
    "hopper": [dict(tile=(128, 256, 64), cluster_m=1), dict(tile=(128, 256, 64), cluster_m=2),
               dict(tile=(128, 256, 64), cluster_m=2, group_m=32)],
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def parse_configs(text: str) -> list[dict]:
    """A list of dict(...) literals, evaluated without builtins beyond dict."""
    tree = ast.parse(text, mode="eval")
    return eval(compile(tree, "<configs>", "eval"), {"__builtins__": {}, "dict": dict})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", choices=["ampere", "hopper"], default="ampere")
    ap.add_argument("--shape", default="8192,8192,8192", help="M,N,K")
    ap.add_argument("--configs", default=None, help="list of dict(...) kernel configs")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if args.path == "hopper":
        from cute_kernels.kernels.gemm.sm90 import GemmSm90 as Kernel
    else:
        from cute_kernels.kernels.gemm.sm80 import GemmSm80 as Kernel
    configs = parse_configs(args.configs) if args.configs else CONFIGS[args.path]
    _, target = device_target(torch.device("cuda"))
    m, n, k = (int(v) for v in args.shape.split(","))
    a = (torch.randn(m, k, device="cuda") / 4).bfloat16()
    b = (torch.randn(n, k, device="cuda") / 4).bfloat16()
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    rows_checked = min(m, 2048)  # the error is checked on the first rows (memory at big M)
    ref = torch.matmul(a[:rows_checked], b.t()).float()
    sync = torch.zeros(1, dtype=torch.int32, device="cuda")  # drift_slack's tile counter
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fns, errs = {}, {}
    for cfg in configs:
        kern = Kernel(a_major="k", b_major="k", epilogue=Epilogue(), **cfg)
        limited = cfg.get("drift_slack") is not None
        counter = (make_fake_compact_tensor(cutlass.Int32, (1,), assumed_align=4),) \
            if limited else ()
        build = Build(kern, (fake_mkl(torch.bfloat16, "k"), fake_mkl(torch.bfloat16, "k"),
                             fake_mkl(torch.bfloat16, "k"), None, cutlass.Int32(1), env_stream(),
                             *counter))
        fn = compile_build(build, target)
        tm, tn = cfg.get("tile", (128, 128))[:2]
        cm = cfg.get("cluster_m", 2)
        units = cdiv(cdiv(m, tm), cm) * cdiv(n, tn)
        grid = persistent_grid(units * cm, sms, cluster_size=cm)
        def run(_s, fn=fn, grid=grid, limited=limited):
            if limited:
                sync.zero_()
            fn(a.unsqueeze(-1), b.unsqueeze(-1), c.unsqueeze(-1), None, grid,
               sync if limited else None)

        c.fill_(float("nan"))
        run(None)
        name = ",".join(f"{key}={val}" for key, val in cfg.items())
        got = c[:rows_checked].float()
        errs[name] = ((got - ref).norm() / ref.norm()).item()
        fns[name] = run
    fns["cuBLAS"] = lambda _s: torch.matmul(a, b.t(), out=c)
    del ref
    t = bench_interleaved(fns, [None], rounds=args.rounds, inner=3)
    flops = 2.0 * m * n * k
    rows = [[name, v.median_ms, flops / v.median_ms / 1e9, f"{errs.get(name, 0.0):.1e}"]
            for name, v in t.items()]
    print(f"{args.path} configs at {m}x{n}x{k}:")
    print(format_table(["config", "ms", "TFLOP/s", "err vs cuBLAS"], rows))


if __name__ == "__main__":
    main()
