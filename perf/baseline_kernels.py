"""What the baselines launch: the kernels cuBLAS (``torch.matmul``) and SDPA (cuDNN, flash)
run for given shapes, with their grids, block sizes, registers, shared memory and GPU time,
read from a torch profiler trace. Names tell the tile shape, cluster and split-K / stream-K
choice of a library whose heuristics we try to match (perf/RESULTS.md's remaining gaps).

    python perf/baseline_kernels.py [--gemm 1024,1024,1024 128,4096,14336 ...]
        [--attention 8,16,1024,128,causal ...] [--decode 1,32,8,1,65536 ...] [--ours]

Shapes: GEMM ``M,N,K`` (bf16, ``x @ w.t()`` as ``F.linear``); attention ``B,H,S,D[,causal]``
(bf16, SDPA layout; cuDNN and flash backends); decode ``B,H,H_kv,S_q,S_kv`` (D 128, GQA,
non-causal; cuDNN and flash). ``--ours``: our ``linear`` / ``attention`` on
the same shapes too, traced the same way. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from functools import partial

import torch


def trace_kernels(fn, repeats: int = 5) -> list[dict]:
    """Kernel events of ``repeats`` calls of ``fn`` after a warm-up: one dict per distinct
    kernel name with its launch shape and median GPU time (us)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    kernels: dict[str, dict] = {}
    for ev in events:
        if ev.get("cat") != "kernel":
            continue
        args = ev.get("args", {})
        entry = kernels.setdefault(ev["name"], dict(
            name=ev["name"], grid=args.get("grid"), block=args.get("block"),
            registers=args.get("registers per thread"), smem=args.get("shared memory"),
            times=[]))
        entry["times"].append(ev.get("dur", 0.0))
    for entry in kernels.values():
        times = sorted(entry.pop("times"))
        entry["calls"] = len(times) // repeats
        entry["us"] = times[len(times) // 2]
    return list(kernels.values())


def show(kernels: list[dict]) -> None:
    for kern in kernels:
        print(f"  {kern['us']:8.1f} us x{kern['calls']} grid {kern['grid']} block "
              f"{kern['block']} regs {kern['registers']} smem {kern['smem']}\n"
              f"    {kern['name'][:200]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemm", nargs="*", default=["1024,1024,1024", "128,4096,14336",
                                                  "3000,5000,3072", "1,4096,14336"])
    ap.add_argument("--attention", nargs="*", default=["8,16,1024,128,causal",
                                                       "16,16,2048,128,causal"])
    ap.add_argument("--decode", nargs="*", default=[])
    ap.add_argument("--ours", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/baseline_kernels.py needs a CUDA GPU (docs/gpu.md)")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    import cute_kernels as ck

    print(torch.cuda.get_device_name(), "| torch", torch.__version__)
    for shape in args.gemm:
        m, n, k = (int(v) for v in shape.split(","))
        x = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        contenders = {"torch.matmul(x, w.t())": partial(torch.matmul, x, w.t(), out=out)}
        if args.ours:
            contenders["cute_kernels.linear"] = partial(ck.linear, x, w, out=out)
        for label, fn in contenders.items():
            print(f"\nGEMM {m} x {n} x {k}: {label}")
            show(trace_kernels(fn))
    for shape in args.attention:
        parts = shape.split(",")
        b, h, s, d = (int(v) for v in parts[:4])
        causal = len(parts) > 4 and parts[4] == "causal"
        q, k, v = (torch.randn(b, h, s, d, device="cuda").bfloat16() for _ in range(3))
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)):
            print(f"\nSDPA {name} B{b} H{h} S{s} D{d}{' causal' if causal else ''}")
            with sdpa_kernel(backend):
                show(trace_kernels(partial(sdpa, q, k, v, is_causal=causal)))
        if args.ours:
            print(f"\ncute_kernels.attention B{b} H{h} S{s} D{d}{' causal' if causal else ''}")
            show(trace_kernels(partial(ck.attention, q, k, v, causal=causal)))
    for shape in args.decode:
        b, h, h_kv, s_q, s_kv = (int(v) for v in shape.split(","))
        q = torch.randn(b, h, s_q, 128, device="cuda").bfloat16()
        k, v = (torch.randn(b, h_kv, s_kv, 128, device="cuda").bfloat16() for _ in range(2))
        label = f"B{b} H{h} H_kv{h_kv} S_q{s_q} S_kv{s_kv} D128"
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)):
            print(f"\nSDPA {name} {label}")
            try:
                with sdpa_kernel(backend):
                    show(trace_kernels(partial(sdpa, q, k, v, enable_gqa=True)))
            except RuntimeError as err:  # a backend that does not take the shape
                print(f"  refused: {str(err).splitlines()[0][:120]}")
        if args.ours:
            print(f"\ncute_kernels.attention {label}")
            show(trace_kernels(partial(ck.attention, q, k, v)))


if __name__ == "__main__":
    main()
