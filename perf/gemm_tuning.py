"""Compare tile/stage configurations of the GEMM kernels in one run (8192^3 bf16, linear form).

    python perf/gemm_tuning.py [--path ampere|hopper]
"""

from __future__ import annotations

import argparse

import cutlass
import torch

from cute_kernels.bench import bench_interleaved, format_table
from cute_kernels.kernels.epilogue import Epilogue
from cute_kernels.kernels.tile_scheduler import persistent_grid
from cute_kernels.runtime.arch import device_target
from cute_kernels.runtime.bridge import env_stream, fake_mkl
from cute_kernels.runtime.compile import Build, compile_build

CONFIGS = {
    "ampere": [dict(tile=(128, 128, 32), stages=3), dict(tile=(128, 128, 64), stages=3),
               dict(tile=(128, 256, 32), stages=3), dict(tile=(128, 128, 32), stages=4)],
    "hopper": [dict(tile=(128, 256, 64)), dict(tile=(128, 128, 64)), dict(tile=(128, 256, 64),
                                                                          group_m=16)],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", choices=["ampere", "hopper"], default="ampere")
    ap.add_argument("--size", type=int, default=8192)
    args = ap.parse_args()
    if args.path == "hopper":
        from cute_kernels.kernels.gemm_sm90 import GemmSm90 as Kernel
    else:
        from cute_kernels.kernels.gemm_sm80 import GemmSm80 as Kernel
    _, target = device_target(torch.device("cuda"))
    s = args.size
    fns = {}
    a = (torch.randn(s, s, device="cuda") / 4).bfloat16()
    b = (torch.randn(s, s, device="cuda") / 4).bfloat16()
    c = torch.empty(s, s, dtype=torch.bfloat16, device="cuda")
    ref = (a.float() @ b.float().t())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for cfg in CONFIGS[args.path]:
        k = Kernel(a_major="k", b_major="k", epilogue=Epilogue(), **cfg)
        build = Build(k, (fake_mkl(torch.bfloat16, "k"), fake_mkl(torch.bfloat16, "k"),
                          fake_mkl(torch.bfloat16, "k"), None, cutlass.Int32(1), env_stream()))
        fn = compile_build(build, target)
        tm, tn = cfg["tile"][:2]
        grid = persistent_grid(-(-s // tm) * -(-s // tn), sms)
        c.fill_(float("nan"))
        fn(a.unsqueeze(-1), b.unsqueeze(-1), c.unsqueeze(-1), None, grid)
        err = ((c.float() - ref).norm() / ref.norm()).item()
        fns[str(cfg)] = (lambda _s, fn=fn, grid=grid:
                         fn(a.unsqueeze(-1), b.unsqueeze(-1), c.unsqueeze(-1), None, grid), err)
    fns_only = {k: v[0] for k, v in fns.items()}
    fns_only["cuBLAS"] = lambda _s: torch.matmul(a, b.t(), out=c)
    t = bench_interleaved(fns_only, [None], rounds=10, inner=3)
    flops = 2.0 * s**3
    rows = [[k, v.median_ms, flops / v.median_ms / 1e9, fns[k][1] if k in fns else 0.0]
            for k, v in t.items()]
    print(f"{args.path} configs at {s}^3:")
    print(format_table(["config", "ms", "TFLOP/s", "rel err"], rows))


if __name__ == "__main__":
    main()
