"""The BCSR stages (``cute_kernels.ops.bsr``) against dense cuBLAS / softmax and torch's BSR
triton kernels, over sparsity (issue 15).

    python perf/bsr.py [--quick] [--n N] [--out perf/results]

One head, N = 32,768 (``--quick``: 8,192) queries and keys, D = 128, bf16; random G x G
layouts with a fraction p of the blocks absent, G in {16, 32, 64, 128}, p in {0.9, 0.95, 0.99}
(quick: G 32 / 64, p 0.95). Per (G, p):

* SDDMM ``scale Q K^T`` at the stored blocks: both our kernels (per stored block, per chunk
  of stored blocks) against dense ``q @ k.T`` (cuBLAS, the whole N x N) and torch's
  ``torch.sparse._triton_ops.sampled_addmm`` on the same layout (ratios for the faster one;
  ``ops.bsr.SDDMM_CHUNKED`` picks the op's kernel);
* softmax over the stored blocks: ours against ``torch.softmax`` of the dense N x N, and the
  fraction of copy bandwidth it reaches on the stored values (read once, written once);
* SpMM ``P V``: ours against dense ``p @ v`` and torch's BSR ``p @ v`` (its triton
  ``bsr_dense_mm``).

Method: cute_kernels/bench.py (interleaved contenders, warm-up, medians; the operands are
reused across calls, the dense ones larger than the L2 at the default N). Writes bsr.json and
bsr_speedup.png (speed-up over dense against p, beside the ideal 1 / (1 - p)) into --out.
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch

D = 128
BLOCKS, QUICK_BLOCKS = (16, 32, 64, 128), (32, 64)
SPARSITIES, QUICK_SPARSITIES = (0.9, 0.95, 0.99), (0.95,)
BARS = "SpMM and SDDMM >= 10x dense at G 64/128 and >= 5x torch's BSR ops at G 32/64 (p 0.95); " \
       "softmax >= 0.6 of copy bandwidth"


def random_layout(n: int, g: int, absent: float, gen: torch.Generator) -> torch.Tensor:
    """A (n, n) BSR layout with G x G blocks, ``absent`` of them missing (>= 1 per row)."""
    m = n // g
    on = torch.rand(m, m, device="cuda", generator=gen) >= absent
    on[torch.arange(m), torch.randint(0, m, (m,), device="cuda", generator=gen)] = True
    crow = torch.zeros(m + 1, dtype=torch.int32, device="cuda")
    crow[1:] = on.sum(1).cumsum(0)
    col = on.nonzero()[:, 1].to(torch.int32)
    values = torch.randn(col.numel(), g, g, device="cuda", generator=gen).bfloat16()
    return torch.sparse_bsr_tensor(crow, col, values, size=(n, n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/bsr.py needs a CUDA GPU (docs/gpu.md)")
    from cute_kernels.bench import (
        bench_interleaved,
        commit_id,
        device_name,
        format_table,
        plot_lines,
        save_results,
    )
    from cute_kernels.ops import bsr as bsr_ops
    from cute_kernels.ops.bsr import bsr_sddmm, bsr_softmax, bsr_spmm

    n = args.n or (8192 if args.quick else 32768)
    blocks = QUICK_BLOCKS if args.quick else BLOCKS
    sparsities = QUICK_SPARSITIES if args.quick else SPARSITIES
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(n, D, device="cuda", generator=gen).bfloat16() for _ in range(3))
    scores = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    try:
        from torch.sparse._triton_ops import sampled_addmm
    except ImportError:  # older or newer torch: leave the column out
        sampled_addmm = None

    dense = {"dense q k^T (cuBLAS)": lambda x: torch.mm(q, k.t(), out=scores),
             "dense softmax": lambda x: torch.softmax(scores, -1),
             "dense p v (cuBLAS)": lambda x: scores @ v}
    def sddmm_with(chunked: bool, lay):
        """bsr_sddmm through one of its two kernels (the module switch, set per call)."""
        def run(x):
            bsr_ops.SDDMM_CHUNKED = chunked
            return bsr_sddmm(q, k, lay)
        return run

    rows, skipped = [], {}
    for g in blocks:
        for p in sparsities:
            lay = random_layout(n, g, p, gen)
            s = bsr_sddmm(q, k, lay)
            prob = bsr_softmax(s)
            stored = s.values().numel() * 2
            copy_src = torch.empty(stored, dtype=torch.uint8, device="cuda")
            fns = {**dense,
                   "ours sddmm": sddmm_with(False, lay),
                   "ours sddmm (chunks)": sddmm_with(True, lay),
                   "ours softmax": lambda x, s=s: bsr_softmax(s),
                   "ours spmm": lambda x, prob=prob: bsr_spmm(prob, v),
                   "copy stored values": lambda x, src=copy_src: src.clone(),
                   "torch bsr spmm": lambda x, prob=prob: prob @ v}
            if sampled_addmm is not None:
                fns["torch bsr sddmm"] = lambda x, s=s: sampled_addmm(s, q, k.t(), beta=0.0,
                                                                      alpha=D ** -0.5)
            for name in list(fns):
                try:
                    fns[name](None)
                except (RuntimeError, ValueError, NotImplementedError, TypeError) as err:
                    skipped[f"G{g} p{p} {name}"] = str(err).splitlines()[0][:160]
                    del fns[name]
            t = bench_interleaved(fns, [None], rounds=args.rounds, warmup=2)

            def ms(name, t=t):
                return t[name].median_ms if name in t else float("nan")

            sddmm = min(ms("ours sddmm"), ms("ours sddmm (chunks)"))
            rows.append([g, p, ms("ours sddmm"), ms("ours sddmm (chunks)"),
                         ms("dense q k^T (cuBLAS)") / sddmm,
                         ms("torch bsr sddmm") / sddmm, ms("ours softmax"),
                         ms("dense softmax") / ms("ours softmax"),
                         ms("copy stored values") / ms("ours softmax"), ms("ours spmm"),
                         ms("dense p v (cuBLAS)") / ms("ours spmm"),
                         ms("torch bsr spmm") / ms("ours spmm"), 1 / (1 - p)])
    headers = ["G", "p", "sddmm ms", "sddmm chunks ms", "best x dense", "best x torch bsr",
               "softmax ms", "x dense", "of copy BW", "spmm ms", "x dense", "x torch bsr",
               "ideal"]
    print(f"\n{device_name()} | torch {torch.__version__} | commit {commit_id()} | "
          f"{datetime.date.today()}\nN {n}, D {D}, bf16, one head\n")
    print(format_table(headers, rows))
    print(f"\nbars: {BARS}")
    for key, why in skipped.items():
        print(f"skipped {key}: {why}")
    payload = {"device": device_name(), "commit": commit_id(), "torch": torch.__version__,
               "date": str(datetime.date.today()), "n": n, "d": D, "headers": headers,
               "rows": rows, "skipped": skipped}
    print("wrote", save_results(args.out, "bsr", payload))
    labels = [f"G{r[0]} p{r[1]}" for r in rows]
    png = plot_lines(f"{args.out}/bsr_speedup.png", f"BCSR stages over dense, N {n} "
                     f"({device_name()})", labels,
                     {"sddmm (best kernel)": [r[4] for r in rows],
                      "softmax": [r[7] for r in rows], "spmm": [r[10] for r in rows],
                      "ideal 1 / (1 - p)": [r[12] for r in rows]},
                     "speed-up over dense (x)")
    if png:
        print("wrote", png)


if __name__ == "__main__":
    main()
