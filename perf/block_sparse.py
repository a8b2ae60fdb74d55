"""Block-sparse attention against FlexAttention on the same BlockMask (issue 15).

    python perf/block_sparse.py [--quick] [--seq S] [--out perf/results]

B 1, H 16, D 128, S = 32,768 (``--quick``: 8,192), bf16. Cases, each a FlexAttention
``BlockMask`` handed to both ``flex_attention`` (compiled) and ours:

* random 128 x 128 blocks with 90 / 93 / 97% absent (every listed block full);
* causal; causal sliding window 4096; documents (uneven segments: lengths cycling
  1/8, 3/8, 1/16 ... of S), their partial blocks masked by ``cute_kernels.masks``;
* causal and the sliding window on 32-key blocks (packed, the masks inside the partial
  blocks): the same attention as the 128-block rows, whose FlexAttention time they face;
* 32-key blocks at 93% absent (ours packed into the column-sparse kernels; FlexAttention
  cannot take blocks below its tile, so the row has ours against the ideal only), once by
  the op's default route and once with the gather kernels expanding the block lists
  (``PACKED_EXPANSION_IN_KERNEL`` forced on; the same route while it is the default).

Per case: ms, TFLOP/s of the visible work (4 * visible pairs * D), ours / Flex, and the
speedup over our dense kernel against the ideal (dense time x visible share). Method:
cute_kernels/bench.py (interleaved contenders, warm-up, medians, input sets rotated over 2x
the L2); SDPA-cuDNN and our dense kernel ride along as references. Writes block_sparse.json
and block_sparse_speedup.png (speedup over our dense kernel against 1 / (1 - p), random
cases) into --out. Needs a CUDA GPU (Hopper for the 128 x 128 block-list kernel).
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch

B, H, D = 1, 16, 128
SEQ, QUICK_SEQ = 32768, 8192
RANDOM_ABSENT = (0.9, 0.93, 0.97)
WINDOW = 4096
BAR_VS_FLEX = 1.2
#: rows of small blocks whose FlexAttention time is that of the same mask on 128-blocks
#: (FlexAttention cannot take key blocks below its tile)
FLEX_TWIN = {"causal, 32-key blocks": "causal",
             f"sliding window {WINDOW}, 32-key blocks": f"sliding window {WINDOW}"}


def random_block_mask(s: int, absent: float, block: int, gen: torch.Generator):
    """A BlockMask (full blocks only) with ``absent`` of the (query 128, key ``block``)
    blocks dropped at random; at least one key block per query block."""
    from torch.nn.attention.flex_attention import BlockMask

    m, n = -(-s // 128), -(-s // block)
    on = torch.rand(B, H, m, n, device="cuda", generator=gen) >= absent
    on[..., 0] |= ~on.any(-1)
    order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    counts = on.sum(-1).to(torch.int32)
    if block != 128:
        return (torch.zeros_like(counts), order, counts, order)
    return BlockMask.from_kv_blocks(torch.zeros_like(counts), order, counts, order,
                                    BLOCK_SIZE=128, seq_lengths=(s, s))


def document_ids(s: int) -> torch.Tensor:
    shares = (1 / 8, 3 / 8, 1 / 16, 5 / 16, 1 / 8)
    ids, doc, pos = torch.empty(s, dtype=torch.int32), 0, 0
    while pos < s:
        length = max(1, int(shares[doc % len(shares)] * s))
        ids[pos:pos + length] = doc
        pos, doc = pos + length, doc + 1
    return ids.view(1, s).cuda()


def cases(s: int, gen: torch.Generator) -> dict:
    """name -> (block mask, our kwargs, visible share of the S x S pairs, sparsity or None)"""
    from torch.nn.attention.flex_attention import create_block_mask

    from cute_kernels import masks

    out = {}
    for p in RANDOM_ABSENT:
        bm = random_block_mask(s, p, 128, gen)
        share = bm.full_kv_num_blocks.sum().item() * 128 * 128 / (B * H * s * s)
        out[f"random {p:.0%} absent"] = (bm, {}, share, p)

    def causal(b, h, q, kv):
        return q >= kv

    def window(b, h, q, kv):
        return (q >= kv) & (q - kv < WINDOW)

    doc = document_ids(s)

    def document(b, h, q, kv):
        return doc[b, q] == doc[b, kv]

    # past 64k the mask would be materialised whole (S^2 bytes): compile its block scan
    compiled = {"_compile": True} if s > 65536 else {}
    out["causal"] = (create_block_mask(causal, None, None, s, s, **compiled),
                     {"mask": masks.causal()}, 0.5, None)
    out[f"sliding window {WINDOW}"] = (create_block_mask(window, None, None, s, s, **compiled),
                                       {"mask": masks.sliding_window(WINDOW)},
                                       min(1.0, WINDOW / s), None)
    d = doc.view(-1)
    share = float(sum((d == i).sum().item() ** 2 for i in d.unique())) / (s * s)
    out["documents"] = (create_block_mask(document, 1, None, s, s, **compiled),
                        {"mask": masks.document(), "doc_ids": doc}, share, None)
    for name, fn, mask in (("causal", causal, masks.causal()),
                           (f"sliding window {WINDOW}", window, masks.sliding_window(WINDOW))):
        small = create_block_mask(fn, None, None, s, s, BLOCK_SIZE=(128, 32), **compiled)
        out[f"{name}, 32-key blocks"] = (small, {"mask": mask}, out[name][2], None)
    small = random_block_mask(s, 0.93, 32, gen)
    out["32-key blocks 93% absent"] = (small, {"block_size": (128, 32)},
                                       small[2].sum().item() * 128 * 32 / (B * H * s * s),
                                       0.93)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"S = {QUICK_SEQ}")
    ap.add_argument("--seq", type=int)
    ap.add_argument("--out", default="perf/results")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/block_sparse.py needs a CUDA GPU (docs/gpu.md)")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import flex_attention

    import cute_kernels as ck
    from cute_kernels.bench import (
        Row,
        bench_interleaved,
        commit_id,
        device_name,
        format_table,
        input_sets_needed,
        plot_lines,
        save_results,
    )
    from cute_kernels.ops import block_sparse as bs_ops
    from cute_kernels.ops.block_sparse import block_lists, block_sparse_attention, packed_rows

    s = args.seq or (QUICK_SEQ if args.quick else SEQ)
    gen = torch.Generator(device="cuda").manual_seed(0)
    sets = [tuple(torch.randn(B, H, s, D, device="cuda", generator=gen).bfloat16()
                  for _ in range(3)) for _ in range(input_sets_needed(3 * B * H * s * D * 2))]
    flex = torch.compile(flex_attention)

    def cudnn(x):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*x)

    fns = {"SDPA-cuDNN": cudnn, "cute dense": lambda x: ck.attention(*x)}
    all_cases = cases(s, gen)
    def ours_on(block_mask, kwargs):
        return lambda x: block_sparse_attention(*x, block_mask, **kwargs)

    def flex_on(block_mask):
        return lambda x: flex(*x, block_mask=block_mask)

    for name, (bm, kw, _, _) in all_cases.items():
        fns[f"ours: {name}"] = ours_on(bm, kw)
        if not isinstance(bm, tuple) and name not in FLEX_TWIN:  # small blocks: no Flex
            fns[f"flex: {name}"] = flex_on(bm)
    small_name = "32-key blocks 93% absent"
    small_lists = all_cases[small_name][0]
    expanded_name = "32-key blocks 93% absent, expanded in the kernel"

    def expanded_in_kernel(x, bm=small_lists, kw=all_cases[small_name][1]):
        """The packed route with the block lists expanded by the gather kernels (the
        library switch ``ops.block_sparse.PACKED_EXPANSION_IN_KERNEL``, set per call)."""
        saved, bs_ops.PACKED_EXPANSION_IN_KERNEL = bs_ops.PACKED_EXPANSION_IN_KERNEL, True
        try:
            return block_sparse_attention(*x, bm, **kw)
        finally:
            bs_ops.PACKED_EXPANSION_IN_KERNEL = saved

    fns[f"ours: {expanded_name}"] = expanded_in_kernel
    # the host expansion of packed blocks (one sync + a few small ops: the route when
    # PACKED_EXPANSION_IN_KERNEL is off or S_kv has a residue block), timed on its own
    fns["prep: packed rows"] = lambda x: packed_rows(
        block_lists(small_lists, B, H, s, s, (128, 32), check_values=False), s)
    errors = {}
    for name in list(fns):
        try:
            fns[name](sets[0])
        except (RuntimeError, ValueError, NotImplementedError) as err:
            errors[name] = str(err).splitlines()[0]
            print(f"skip {name}: {errors[name]}")
            del fns[name]
    timings = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)

    def ms(name):
        return timings[name].median_ms if name in timings else float("nan")

    dense = ms("cute dense")
    headers = ["case", "visible", "ours ms", "flex ms", "ours / flex", "ours TFLOP/s",
               "speedup vs our dense", "ideal", "of ideal"]
    rows = []
    row_cases = {**{n: c[2] for n, c in all_cases.items()},
                 expanded_name: all_cases[small_name][2]}
    for name, share in row_cases.items():
        ours, fl = ms(f"ours: {name}"), ms(f"flex: {FLEX_TWIN.get(name, name)}")
        work = 4.0 * B * H * s * s * share * D
        rows.append([name, share, ours, fl, fl / ours, work / (ours * 1e-3) / 1e12,
                     dense / ours, 1 / share, dense / ours * share])
    print(f"\n{device_name()} | torch {torch.__version__} | commit {commit_id()} | "
          f"{datetime.date.today()}\nB{B} H{H} S{s} D{D}: SDPA-cuDNN {ms('SDPA-cuDNN'):.3f} ms, "
          f"cute dense {dense:.3f} ms\n")
    print(format_table(headers, rows))
    print(f"\n{small_name}: {ms('ours: ' + small_name):.3f} ms; the host expansion of its "
          f"blocks (packed_rows, the route with PACKED_EXPANSION_IN_KERNEL off) alone takes "
          f"{ms('prep: packed rows'):.3f} ms")
    vs_flex = [r[4] for r in rows if r[3] == r[3] and r[0] not in FLEX_TWIN]
    print(f"\nours / FlexAttention: worst {min(vs_flex, default=float('nan')):.2f}x "
          f"(bar >= {BAR_VS_FLEX}x)")
    payload = {"device": device_name(), "commit": commit_id(), "torch": torch.__version__,
               "date": str(datetime.date.today()), "shape": [B, H, s, D],
               "headers": headers, "rows": rows, "skipped": errors,
               "timings": Row(f"B{B} H{H} S{s} D{D}", timings)}
    print("wrote", save_results(args.out, "block_sparse", payload))
    random_rows = [r for r in rows if r[0].startswith("random")]
    png = plot_lines(f"{args.out}/block_sparse_speedup.png",
                     f"block-sparse attention, random 128-blocks, B{B} H{H} S{s} D{D} "
                     f"({device_name()})", [r[0] for r in random_rows],
                     {"ours vs our dense": [r[6] for r in random_rows],
                      "flex vs our dense": [dense / ms(f"flex: {r[0]}") for r in random_rows],
                      "ideal 1 / (1 - p)": [r[7] for r in random_rows]}, "speedup (x)")
    if png:
        print("wrote", png)


if __name__ == "__main__":
    main()
