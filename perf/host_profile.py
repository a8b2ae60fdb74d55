"""Where an op's host time goes (the CPU side of small, launch-bound calls): cProfile over
many calls of each op, no sync inside, top functions by their own time.

    python perf/host_profile.py [--calls 300] [--top 12] [--ops bsr_softmax,decode]

Ops: ``bsr_sddmm`` / ``bsr_softmax`` / ``bsr_spmm`` (N 8192, G 64, 95% of blocks absent, one
head), ``decode`` (``attention`` at B1 H32 H_kv8 S_q1 S_kv4096 D128, GQA packed: split by
default; ``decode_unsplit`` with ``num_splits=1``; ``sdpa_decode`` torch's), ``linear``
(1024^3, ``out=``), ``linear_decode`` (13 x 14336 x 4096: swap-AB, C^T stored into out),
``linear_split`` / ``matmul_split`` (1 x 2304 x 9216: swap-AB split through the workspace),
``matmul`` (torch's, 1024^3, for scale), ``gated_decode`` (``gated_mlp_up``, 16 tokens of
Llama 3 8B's up-projection) and ``torch_gated_decode`` (``F.linear``, then silu * up);
``decode_kernel`` / ``linear_split_kernel`` / ``linear_decode_kernel``: the compiled host
function of that op's cached plan called alone on preallocated tensors (TVM-FFI, the TMA
descriptors, the launches), so the op's row minus this one is our Python. Prints
the host microseconds per call (the median of ``--passes`` passes), then each op's profile.
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time

import torch


def ops() -> dict:
    sys.path.insert(0, "perf")
    from bsr import random_layout

    import cute_kernels as ck

    gen = torch.Generator(device="cuda").manual_seed(0)
    n, d = 8192, 128
    q, k, v = (torch.randn(n, d, device="cuda", generator=gen).bfloat16() for _ in range(3))
    lay = random_layout(n, 64, 0.95, gen)
    s = ck.bsr_sddmm(q, k, lay)
    p = ck.bsr_softmax(s)
    dq = torch.randn(1, 32, 1, d, device="cuda", generator=gen).bfloat16()
    dk, dv = (torch.randn(1, 8, 4096, d, device="cuda", generator=gen).bfloat16()
              for _ in range(2))
    x1, w1 = torch.randn(1024, 1024, device="cuda").bfloat16(), torch.randn(
        1024, 1024, device="cuda").bfloat16()
    y1 = torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16)
    x2, w2 = torch.randn(13, 4096, device="cuda").bfloat16(), torch.randn(
        14336, 4096, device="cuda").bfloat16()
    y2 = torch.empty(13, 14336, device="cuda", dtype=torch.bfloat16)
    # a swapped launch split through the workspace (Gemma 2 2B's down-projection, one token)
    x3, w3 = torch.randn(1, 9216, device="cuda").bfloat16(), torch.randn(
        2304, 9216, device="cuda").bfloat16()
    y3 = torch.empty(1, 2304, device="cuda", dtype=torch.bfloat16)
    xg = torch.randn(16, 4096, device="cuda").bfloat16()  # Llama 3 8B's up-projection
    wg = (torch.randn(2 * 14336, 4096, device="cuda") / 64).bfloat16()
    bare = _bare_kernels(dq, dk, dv, (x2, w2, y2), (x3, w3, y3))
    return {**bare, "bsr_sddmm": lambda: ck.bsr_sddmm(q, k, lay),
            "bsr_softmax": lambda: ck.bsr_softmax(s),
            "bsr_spmm": lambda: ck.bsr_spmm(p, v), "decode": lambda: ck.attention(dq, dk, dv),
            "decode_unsplit": lambda: ck.attention(dq, dk, dv, num_splits=1),
            "sdpa_decode": lambda: torch.nn.functional.scaled_dot_product_attention(
                dq, dk, dv, enable_gqa=True),
            "linear": lambda: ck.linear(x1, w1, out=y1),
            "linear_decode": lambda: ck.linear(x2, w2, out=y2),
            "linear_split": lambda: ck.linear(x3, w3, out=y3),
            "matmul_split": lambda: torch.matmul(x3, w3.t(), out=y3),
            "matmul": lambda: torch.matmul(x1, w1.t(), out=y1),
            "gated_decode": lambda: ck.gated_mlp_up(xg, wg),
            "torch_gated_decode": lambda: _torch_gated(xg, wg)}


def _bare_kernels(q, k, v, decode, split) -> dict:
    """The compiled host functions of the decode attention and the two ``linear`` plans,
    called as their plans call them, on tensors allocated once."""
    import cute_kernels as ck
    from cute_kernels.ops import attention as attention_ops
    from cute_kernels.ops import gemm as gemm_ops

    ck.attention(q, k, v)
    plan = attention_ops._PLANS[attention_ops._plan_key(q, k, v, False, None, None, None)]
    qp = q.reshape(plan.pack) if plan.pack is not None else q
    b, h, s_q, d = qp.shape
    o, lse = torch.empty_like(qp), torch.empty((b, h, s_q), dtype=torch.float32, device="cuda")
    n = plan.splits
    if n > 1 and not plan.cluster:
        parts = (torch.empty((n * b, h, s_q, d), dtype=q.dtype, device="cuda"),
                 torch.empty((n * b, h, s_q), dtype=torch.float32, device="cuda"))
        tensors = (qp, k, v, *parts, o, lse)
    else:
        tensors = (qp, k, v, o, lse)
    table = {"decode_kernel": lambda: plan.kernel(*tensors, *plan.args)}
    for name, (x, w, y) in (("linear_decode_kernel", decode), ("linear_split_kernel", split)):
        ck.linear(x, w, out=y)
        gp = gemm_ops._PLANS[gemm_ops._plan_key(x, w, None, y, y.dtype, None)]
        if gp.workspace:
            ws = torch.empty(gp.workspace, dtype=torch.float32, device="cuda")
            args = gemm_ops.split_params().call_args(mX=x, mW=w, mWs=ws, mOut=y, mBias=None,
                                                     splits=gp.splits, num_ctas=gp.ctas)
        else:
            args = gemm_ops.gemm_params().call_args(mA=w, mB=x, mC=y, mBias=None,
                                                    num_ctas=gp.ctas, mSync=None)
        table[name] = lambda gp=gp, args=args: gp.kernel(*args)
    return table


def _torch_gated(x, w_packed):
    pre = torch.nn.functional.linear(x, w_packed)
    return torch.nn.functional.silu(pre[:, 1::2]) * pre[:, 0::2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--passes", type=int, default=7, help="timed passes of --calls calls")
    ap.add_argument("--ops", default="bsr_sddmm,bsr_softmax,bsr_spmm,decode")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/host_profile.py needs a CUDA GPU (docs/gpu.md)")
    table = ops()
    print("cute_kernels from", sys.modules["cute_kernels"].__file__)
    for name in args.ops.split(","):
        fn = table[name]
        for _ in range(10):
            fn()
        passes = []  # the median of several passes: this host's timings jump between them
        for _ in range(args.passes):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            passes.append((time.perf_counter() - start) / args.calls * 1e6)
        host = statistics.median(passes)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
        body = "\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip())
        print(f"\n=== {name}: {host:.1f} us of host time per call (no profiler)\n{body}")


if __name__ == "__main__":
    main()
