"""Host cost of one call, on a tiny input where the GPU work is negligible.

    python perf/launch_overhead.py

Rows: the public op (validation + dispatch + cached kernel lookup + TVM-FFI launch), the bare
TVM-FFI compiled kernel, and torch's own tiny-op cost for scale. Wall clock per call over many
calls, with the queue drained at the end (launches are asynchronous, so this is host cost).
"""

from __future__ import annotations

import time

import torch

import cute_kernels as ck
from cute_kernels.bench import device_name, format_table
from cute_kernels.ops.bitpack import make_build
from cute_kernels.runtime.arch import device_target
from cute_kernels.runtime.compile import compile_build


def per_call_us(fn, iters=20000) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> None:
    mask = torch.rand(1, 64, device="cuda") < 0.5  # flat variant: one 64-entry row
    out = torch.empty(1, 8, dtype=torch.uint8, device="cuda")
    _, target = device_target(mask.device)
    raw = compile_build(make_build("pack_mask", "flat"), target)
    m8, o8 = mask.view(torch.uint8).view(-1), out.view(-1)
    rows = [
        ["ck.pack_mask(mask, out=out)", per_call_us(lambda: ck.pack_mask(mask, out=out))],
        ["ck.pack_mask(mask) (allocates)", per_call_us(lambda: ck.pack_mask(mask))],
        ["compiled kernel via TVM-FFI", per_call_us(lambda: raw(m8, o8))],
        ["torch.add (tiny, for scale)", per_call_us(lambda: torch.add(o8, 1, out=o8))],
    ]
    x = torch.randn(128, 64, device="cuda").bfloat16()
    w = torch.randn(256, 64, device="cuda").bfloat16()
    y = torch.empty(128, 256, device="cuda").bfloat16()
    rows += [
        ["ck.linear(x, w, out=y) 128x256x64", per_call_us(lambda: ck.linear(x, w, out=y), 5000)],
        ["torch.matmul(x, w.t(), out=y)", per_call_us(lambda: torch.matmul(x, w.t(), out=y),
                                                      5000)],
    ]
    print(f"{device_name()}: host cost per call\n")
    print(format_table(["call", "us/call"], rows))


if __name__ == "__main__":
    main()
