"""Benchmark suites: ours against baselines on given shapes, returning table rows.

Used by ``cute-kernels demo`` (default shapes, one table) and by ``perf/`` scripts (sweeps,
JSON and plots). Needs a CUDA GPU.
"""

from __future__ import annotations

import torch

from .bench import Row, bench_interleaved, graph_ms, input_sets_needed
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


def gated_contenders(path: str | None, need_liger: bool = False) -> dict:
    """ours, cuBLAS (one 2I-wide call) + Liger's SiLU-mul, eager torch. Without liger-kernel
    installed (and not ``need_liger``) the second is cuBLAS + torch's silu-mul."""
    import torch.nn.functional as F

    from . import force_path, gated_mlp_up

    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        silu_mul, fused_name = LigerSiLUMulFunction.apply, "cuBLAS+Liger"
    except ImportError:
        if need_liger:
            raise
        silu_mul, fused_name = (lambda g, u: F.silu(g) * u), "cuBLAS+torch"

    def ours(s):
        if path is None:  # no context manager per call: decode-sized calls are host-bound
            return gated_mlp_up(s["x"], s["w_packed"])
        with force_path(path):
            return gated_mlp_up(s["x"], s["w_packed"])

    def cublas_liger(s):
        inter = s["w_cat"].shape[0] // 2
        # (2, M, I) = x @ [W_gate; W_up]^T as one strided-batched cuBLAS call (x broadcast)
        pre = torch.matmul(s["x"], s["w_cat"].view(2, inter, -1).transpose(1, 2))
        return silu_mul(pre[0], pre[1])

    def eager(s):
        inter = s["w_cat"].shape[0] // 2
        pre = s["x"] @ s["w_cat"].t()
        return F.silu(pre[:, :inter]) * pre[:, inter:]

    return {"cute": ours, fused_name: cublas_liger, "torch": eager}


def peak_bytes(fn, inputs) -> int:
    """Peak allocation of one call above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def gated_mlp_rows(shapes, path: str | None = None, rounds: int = 15,
                   need_liger: bool = False, graphs: bool = False, variants=None) -> list[Row]:
    """(label, tokens, hidden, intermediate) shapes: SwiGLU up-projection, ours vs the unfused
    baselines, interleaved; each row's ``work`` also holds each contender's peak bytes and,
    with ``graphs``, its GPU ms per call in a CUDA graph (``graph_<name>``). ``variants``:
    ``variants(inputs)`` -> {name: fn} of further contenders per shape (forced schedules)."""
    from . import pack_gated_weight

    base = gated_contenders(path, need_liger)
    fused = list(base)[1]
    rows = []
    for label, tokens, hidden, inter in shapes:
        per_set = 2 * (tokens * hidden + 2 * inter * hidden)
        sets = []
        for _ in range(input_sets_needed(per_set)):
            w_gate = torch.randn(inter, hidden, device="cuda").bfloat16() / hidden ** 0.5
            w_up = torch.randn(inter, hidden, device="cuda").bfloat16() / hidden ** 0.5
            sets.append({"x": torch.randn(tokens, hidden, device="cuda").bfloat16(),
                         "w_packed": pack_gated_weight(w_gate, w_up),
                         "w_cat": torch.cat([w_gate, w_up])})
            del w_gate, w_up
        extra = variants(sets[0]) if variants else {}
        fns = {**base, **extra}
        ref = fns[fused](sets[0]).float()
        for name in ("cute", *extra):
            err = ((fns[name](sets[0]).float() - ref).norm() / ref.norm()).item()
            if err > 2e-2:
                raise RuntimeError(f"{label}: {name} differs from {fused} (rel {err:.2e})")
        del ref
        big = tokens * inter * hidden > 2**44
        t = bench_interleaved(fns, sets, rounds=max(4, rounds // 3) if big else rounds,
                              warmup=1 if big else 3, inner=len(sets) if big else None)
        mem = {name: peak_bytes(fn, sets[0]) for name, fn in fns.items()}
        graph = {f"graph_{n}": graph_ms(fn, sets) for n, fn in fns.items()} if graphs else {}
        rows.append(Row(f"{label} {tokens}x{hidden}->{inter}", t,
                        {"flops": 2.0 * tokens * hidden * 2 * inter,
                         **{f"peak_{n}": float(b) for n, b in mem.items()}, **graph}))
        del sets
        torch.cuda.empty_cache()
    return rows


def attention_rows(shapes, path: str | None = None, rounds: int = 10) -> list[Row]:
    """(B, H, S, D, causal) shapes: ours vs SDPA's cuDNN backend, interleaved, after a
    correctness check against SDPA; non-causal rows also time ``attention_colsum``."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from . import attention, attention_colsum, force_path

    rows = []
    for b, h, s, d, causal in shapes:
        sets = [tuple(torch.randn(b, h, s, d, device="cuda").bfloat16() for _ in range(3))
                for _ in range(input_sets_needed(3 * b * h * s * d * 2))]

        def ours(st, causal=causal):
            with force_path(path):
                return attention(st[0], st[1], st[2], causal=causal)

        def cudnn(st, causal=causal):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(st[0], st[1], st[2], is_causal=causal)

        fns = {"cute": ours, "SDPA-cuDNN": cudnn}
        ref = cudnn(sets[0]).float()
        err = ((ours(sets[0]).float() - ref).norm() / ref.norm()).item()
        if err > 2e-2:
            raise RuntimeError(f"attention {b}x{h}x{s}x{d}: ours differs from SDPA ({err:.1e})")
        if not causal:
            prev = {id(st[0]): attention(*st, return_lse=True)[1] for st in sets}

            def colsum(st, prev=prev):
                with force_path(path):
                    return attention_colsum(st[0], st[1], st[2], prev[id(st[0])])

            fns["cute-colsum"] = colsum
        t = bench_interleaved(fns, sets, rounds=rounds)
        rows.append(Row(f"B{b} H{h} S{s} D{d}{' causal' if causal else ''}", t,
                        {"flops": 4.0 * b * h * s * s * d / (2 if causal else 1)}))
        del sets
    return rows


def column_sparse_rows(shapes, sparsity: float = 0.93, group: int = 192,
                       rounds: int = 8) -> list[Row]:
    """(B, H, S, D) shapes: column-sparse attention with ``sparsity`` of the columns dropped
    per query group (random columns, picked by ``topk_indices`` from random scores) vs
    SDPA-cuDNN dense and our dense kernel, interleaved, after a spot check against the
    float32 reference on the first group."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from . import attention, column_sparse_attention, reference, topk_indices

    rows = []
    for b, h, s, d in shapes:
        sets = [tuple(torch.randn(b, h, s, d, device="cuda").bfloat16() for _ in range(3))
                for _ in range(input_sets_needed(3 * b * h * s * d * 2))]
        groups = -(-s // group)
        indices, counts = topk_indices(torch.rand(b, h, groups, s, device="cuda"),
                                       sparsity=sparsity)
        q, k, v = sets[0]
        got = column_sparse_attention(q, k, v, indices, counts, group=group)
        want = reference.column_sparse_attention(q[:1, :1, :group], k[:1, :1], v[:1, :1],
                                                 indices[:1, :1, :1], counts[:1, :1, :1],
                                                 group=group)
        err = (got[:1, :1, :group].float() - want).abs().max().item()
        if err > 2e-2:
            raise RuntimeError(f"column-sparse attention {b}x{h}x{s}x{d}: max error {err:.1e}")

        def cudnn(st):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(*st)

        t = bench_interleaved({
            "cute sparse": lambda st, idx=indices, cnt=counts: column_sparse_attention(
                *st, idx, cnt, group=group),
            "cute dense": lambda st: attention(*st),
            "SDPA-cuDNN": cudnn}, sets, rounds=rounds)
        rows.append(Row(f"B{b} H{h} S{s} D{d} {sparsity:.0%} sparse", t,
                        {"count": float(counts.flatten()[0])}))
        del sets
    return rows
