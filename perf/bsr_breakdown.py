"""Where the BCSR ops' time goes: each op's CUDA kernels (ours and torch's index work) under
the torch profiler, against the op's whole time from CUDA events (issue 15).

    python perf/bsr_breakdown.py [--n 32768] [--blocks 16,32,64,128] [--absent 0.95]

One head, D = 128, bf16, random layouts (perf/bsr.py's). Per (G, op): the op's median ms,
the device time of each kernel it launched (per call), the share of the op's time spent in
our kernel, the host time per call (no sync), and our kernel's bandwidth on the bytes it
must move (the stored values, plus the dense operands it reads: Q and K rows per stored block
for SDDMM, V rows for SpMM).
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch

from cute_kernels.bench import host_us

D = 128
CALLS = 5


def kernel_times(fn) -> dict[str, float]:
    """Device ms per call of each CUDA kernel ``fn`` launches (mean over CALLS calls)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for ev in prof.events():
        us = getattr(ev, "device_time", None)
        if us is None:
            us = getattr(ev, "cuda_time", 0.0)
        if ev.device_type == torch.autograd.DeviceType.CUDA and us:
            per[ev.name] += us / 1e3 / CALLS
    return dict(per)


def spmm_in_index_order(p, v):
    """bsr_spmm with its CTAs in block-row order whatever the grid (no longest-first sort):
    what the sort buys where the grid takes more than one wave (G = 128)."""
    from cute_kernels.ops import bsr as bsr_ops

    saved = bsr_ops.Pattern.spmm_order
    bsr_ops.Pattern.spmm_order = lambda self, d: bsr_ops._identity_order(
        self.flat, self.size[0] // self.block, self.crow.device)
    try:
        return bsr_ops.bsr_spmm(p, v)
    finally:
        bsr_ops.Pattern.spmm_order = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--blocks", default="16,32,64,128")
    ap.add_argument("--absent", type=float, default=0.95)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/bsr_breakdown.py needs a CUDA GPU (docs/gpu.md)")
    sys.path.insert(0, "perf")
    from bsr import random_layout

    from cute_kernels.bench import bench_interleaved, format_table
    from cute_kernels.ops.bsr import bsr_sddmm, bsr_softmax, bsr_spmm

    n = args.n
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(n, D, device="cuda", generator=gen).bfloat16() for _ in range(3))
    rows = []
    for g in (int(x) for x in args.blocks.split(",")):
        lay = random_layout(n, g, args.absent, gen)
        s = bsr_sddmm(q, k, lay)
        p = bsr_softmax(s)
        nnz = s.values().shape[0]
        stored = nnz * g * g * 2
        moved = {"sddmm": stored + 2 * nnz * g * D * 2, "softmax": 2 * stored,
                 "spmm": stored + nnz * g * D * 2 + n * D * 2}
        fns = {"sddmm": lambda lay=lay: bsr_sddmm(q, k, lay),
               "softmax": lambda s=s: bsr_softmax(s), "spmm": lambda p=p: bsr_spmm(p, v),
               "spmm index order": lambda p=p: spmm_in_index_order(p, v)}
        moved["spmm index order"] = moved["spmm"]
        t = bench_interleaved({name: (lambda x, f=f: f()) for name, f in fns.items()}, [None],
                              rounds=10, warmup=2)
        for name, fn in fns.items():
            kernels = kernel_times(fn)
            # our kernels are the CuTe DSL's ("kernel_cutlass_kernel_cute_kernels..._Bsr...")
            ours = sum(ms for kname, ms in kernels.items() if "Bsr" in kname) or float("nan")
            others = "; ".join(f"{kname[:40]} {ms * 1e3:.1f}us" for kname, ms in
                               sorted(kernels.items(), key=lambda x: -x[1]))
            op_ms = t[name].median_ms
            rows.append([g, name, nnz, op_ms, ours, ours / op_ms, moved[name] / ours / 1e6,
                         host_us(fn), others[:120]])
    print(f"\nN {n}, D {D}, bf16, one head, {args.absent:.0%} of blocks absent\n")
    print(format_table(["G", "op", "nnz", "op ms", "our kernel ms", "kernel share",
                        "kernel GB/s", "host us", "kernels (per call)"], rows))


if __name__ == "__main__":
    main()
