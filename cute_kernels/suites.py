"""Benchmark suites: ours against baselines on given shapes, returning table rows.

Used by ``cute-kernels demo`` (default shapes, one table) and by ``perf/`` scripts (sweeps,
JSON and plots). Needs a CUDA GPU.
"""

from __future__ import annotations

import torch

from .bench import Row, bench_interleaved, input_sets_needed
from .ops.bitpack import pack_mask, pack_mask_reference, unpack_mask, unpack_mask_reference


def copy_bandwidth_gbs(nbytes: int = 2**30) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), the memory ceiling."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    t = bench_interleaved({"copy": lambda s: dst.copy_(s)}, [src], rounds=20, inner=5)
    return 2 * nbytes / (t["copy"].median_ms * 1e-3) / 1e9


def bitpack_rows(shapes: list[tuple[int, int]], *, rounds: int = 25) -> list[Row]:
    """pack_mask and unpack_mask vs torch.compile'd torch and a copy of the same byte count,
    all five interleaved in one timing loop."""
    pack_compiled = torch.compile(pack_mask_reference, dynamic=False)
    unpack_compiled = torch.compile(unpack_mask_reference, dynamic=False)
    rows = []
    for r, n in shapes:
        moved = r * n + r * ((n + 7) // 8)  # bytes either direction reads + writes, at least
        sets = []
        for _ in range(input_sets_needed(2 * moved)):
            mask = torch.rand(r, n, device="cuda") < 0.5
            copy_src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
            sets.append((mask, pack_mask_reference(mask), copy_src))
        copy_dst = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
        t = bench_interleaved({
            "pack": lambda s: pack_mask(s[0]),
            "pack torch.compile": lambda s: pack_compiled(s[0]),
            "unpack": lambda s, n=n: unpack_mask(s[1], n),
            "unpack torch.compile": lambda s, n=n: unpack_compiled(s[1], n),
            "copy": lambda s, d=copy_dst: d.copy_(s[2]),
        }, sets, rounds=rounds)
        for kind in ("pack", "unpack"):
            rows.append(Row(f"{kind}_mask {r}x{n}",
                            {"cute": t[kind], "torch.compile": t[f"{kind} torch.compile"],
                             "copy": t["copy"]},
                            {"bytes": float(moved)}))
    return rows


def gbs(row: Row, name: str) -> float:
    return row.work["bytes"] / (row.timings[name].median_ms * 1e-3) / 1e9


def gemm_rows(shapes: list[tuple[int, int, int]], *, path: str | None = None,
              dtype=torch.bfloat16, rounds: int = 15) -> list[Row]:
    """``linear(x, w)`` (x (M, K), w (N, K): the weight layout of nn.Linear) vs torch's cuBLAS
    on the same operands, interleaved. ``path`` forces a kernel path (None: native)."""
    from .ops.gemm import linear
    from .runtime.arch import force_path

    rows = []
    for m, n, k in shapes:
        sets = []
        for _ in range(input_sets_needed(2 * (m * k + n * k + m * n))):
            sets.append(((torch.randn(m, k, device="cuda") / 4).to(dtype),
                         (torch.randn(n, k, device="cuda") / 4).to(dtype)))
        out = torch.empty(m, n, dtype=dtype, device="cuda")

        def ours(s, out=out):
            with force_path(path):
                linear(s[0], s[1], out=out)

        def cublas(s, out=out):
            torch.matmul(s[0], s[1].t(), out=out)

        t = bench_interleaved({"cute": ours, "cuBLAS": cublas}, sets, rounds=rounds)
        rows.append(Row(f"{m}x{n}x{k}", t, {"flops": 2.0 * m * n * k}))
    return rows


def tflops(row: Row, name: str) -> float:
    return row.work["flops"] / (row.timings[name].median_ms * 1e-3) / 1e12
