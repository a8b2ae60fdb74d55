"""Where the time of packed small key blocks goes at short sequences (issue 15: 32-key blocks
at 93% absent reach 0.46 of the ideal at S 8k, bar 0.6): the op in an eager loop, the same
calls replayed from a CUDA graph (GPU time only), the host time per call, and our dense
kernel, each at the given sequence lengths.

    python perf/block_sparse_small.py [--seq 8192,32768] [--block 32] [--rounds 10] [--profile]

B 1, H 16, D 128, bf16, random (128, block) blocks with 93% absent (``perf/block_sparse.py``'s
case). Of ideal = (dense ms / ours ms) x visible share, as there. The graph column includes
the block lists' conversion (the op converts them again under capture: its cache of converted
lists is off while capturing). ``--profile``: per S, the host functions with the most own time
(cProfile) and the GPU kernels (torch.profiler) of 50 calls. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch

sys.path.insert(0, "perf")
from block_sparse import B, D, H, random_block_mask  # noqa: E402

from cute_kernels.bench import (  # noqa: E402
    bench_interleaved,
    commit_id,
    device_name,
    format_table,
    graph_ms,
    host_us,
)


def profile(fn, s: int, calls: int = 50) -> None:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    print(f"\n=== S {s}: host, {calls} calls\n" + "\n".join(text.getvalue().splitlines()[6:24]))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", default="8192,32768")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/block_sparse_small.py needs a CUDA GPU (docs/gpu.md)")
    import cute_kernels as ck

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for s in (int(v) for v in args.seq.split(",")):
        q, k, v = (torch.randn(B, H, s, D, device="cuda", generator=gen).bfloat16()
                   for _ in range(3))
        lists = random_block_mask(s, 0.93, args.block, gen)
        share = lists[2].sum().item() * 128 * args.block / (B * H * s * s)

        def ours(q=q, k=k, v=v, lists=lists):
            return ck.block_sparse_attention(q, k, v, lists, block_size=(128, args.block))

        def dense(q=q, k=k, v=v):
            return ck.attention(q, k, v)

        t = bench_interleaved({"ours": lambda _: ours(), "dense": lambda _: dense()}, [None],
                              rounds=args.rounds, warmup=2)
        eager, dense_ms = t["ours"].median_ms, t["dense"].median_ms
        g_ours = graph_ms(lambda _: ours(), inner=10, reps=10)
        g_dense = graph_ms(lambda _: dense(), inner=10, reps=10)
        host = host_us(ours, 100, warmup=5) / 1e3
        rows.append([s, share, eager, g_ours, host, dense_ms, g_dense,
                     dense_ms / eager * share, g_dense / g_ours * share])
        if args.profile:
            profile(ours, s)
    print(f"{device_name()} | commit {commit_id()} | B{B} H{H} D{D}, {args.block}-key blocks, "
          f"93% absent\n")
    print(format_table(["S", "visible", "eager ms", "graph ms", "host ms / call", "dense ms",
                        "dense graph ms", "of ideal (eager)", "of ideal (graph)"], rows))


if __name__ == "__main__":
    main()
