"""Column-sparse attention (issue 14) on a GPU: the gather kernels against dense attention, the
top-k index builder against torch.topk, and ColumnSparseAttention over a synthetic sequence.

    python perf/column_sparse.py [--quick] [--parts sweep,topk,steps,lists] [--seq S]
                                 [--path hopper|ampere] [--out perf/results]

1. ``sweep``: ``column_sparse_attention`` at B 1, H 24, S 118,784, D 128, bf16, non-causal
   (HunyuanVideo; ``--quick`` and ``--seq``: another S), group 192, at sparsity p = 0, 0.8,
   0.9, 0.93, 0.97, against SDPA with the cuDNN backend and our dense ``ck.attention``, all
   interleaved in one timing loop. Each query group gets its own random set of distinct key
   columns, in increasing order (as the index builders return them; p = 0: every column),
   of two sizes: ``exact`` = ceil((1 - p) S) columns (the last key tile partly filled) and
   ``x128`` = that rounded up to a multiple of 128 (whole 128-key tiles, as
   ``multiple_of=128`` gives). Columns: ms, the TFLOP/s of the work done (4 B H S_q count
   D / time), the speedup over cuDNN and over our dense kernel, the ideal S / count (= 1 /
   (1 - p) up to the rounding of the count) and the fraction of it reached; ``max err``: the
   largest |o - reference| over the first two and the last query group of head 0 against
   the float32 reference (a first-run check of kernels that had not run on a GPU before).
   The all-columns row gives "gather / our dense" = dense time / gather time (bar >= 0.85).
2. ``topk``: ``topk_indices(scores, k)`` against ``torch.topk(scores, k, sorted=False)`` and
   against ``topk_indices_reference`` (torch.topk plus the same conversion into increasing
   index lists: the same output as ours) on (24 x 619, 118,784) (the column sums of the sweep
   shape) and (8192, 16384) scores, bfloat16 and float32, N(0, 1), k = 7% of the columns.
   Recall against torch.topk's set (mean and worst row), and tie-aware: the share of our
   columns whose score is at or above the row's k-th largest (1.0 = exact up to ties).
3. ``steps``: ``ColumnSparseAttention`` (93% sparsity, dense at steps 0, 1 and 5) over 10
   steps of a synthetic sequence at the sweep shape: q/k/v drift slowly, x_{t+1} = x_t +
   0.05 std(x) noise; the queries of a group share a direction (q = 3 (u_group + 0.5 n) /
   sqrt(1.25)), so each group's logits have a structure a column set can follow. Per step:
   the time of the index-list and of the bitpacked-mask module (one call each, CUDA events,
   after a warm-up pass over the whole sequence), our dense attention's time, and the error
   against it, ||o - o_dense|| / ||o_dense||, beside two baselines: the last dense step's
   output reused ("stale") and the sparse attention alone without the cache ("no cache").

4. ``lists``: index lists from a bitpacked 93% mask of (24 x 619, S) rows (multiple_of 128):
   the column-lists kernel (kernels/column_lists.py, counts given), the counts kernel, and
   ``column_indices`` (the op: counts kernel, one sync, lists kernel), checked equal, and
   the bandwidth of the lists kernel and of the op (packed bytes read + list bytes written)
   against a device copy of as many bytes (bar: >= 50% of copy bandwidth).

Method: cute_kernels/bench.py (interleaved contenders, warm-up, medians, input sets rotated
over 2x the L2); parts 1 and 2 through ``bench_interleaved``. Needs a CUDA GPU and about
30 GB of its memory at the full size. Writes column_sparse.json, column_sparse_speedup.png and
column_sparse_steps.png into --out.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys

import torch

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

DEVICE = "cuda"
B, H, D, GROUP = 1, 24, 128, 192
SEQ, QUICK_SEQ = 118784, 32768
SPARSITIES = (0.0, 0.8, 0.9, 0.93, 0.97)
TILE = 128  # the x128 counts
GATHER_BAR = 0.85  # gather / our dense at p = 0
TOPK_KEEP = 0.07
TOPK_EXTRA_SHAPES = ((8192, 16384),)
STEP_SPARSITY, STEPS, DENSE_STEPS, REFRESH_EVERY = 0.93, 10, 2, 5
DRIFT, Q_STD, Q_NOISE = 0.05, 3.0, 0.5


def require_gpu() -> None:
    if not torch.cuda.is_available():
        sys.exit("perf/column_sparse.py needs a CUDA GPU and torch.cuda.is_available() is "
                 "False here: run it on a GPU machine (docs/gpu.md)")


def groups(s: int) -> int:
    return -(-s // GROUP)


def counts_for(p: float, s_kv: int) -> dict[str, int]:
    """{"exact": ceil((1 - p) S_kv), "x128": rounded up to a multiple of 128}, at most S_kv;
    one entry when both are equal."""
    exact = min(s_kv, max(1, math.ceil((1 - p) * s_kv - 1e-9)))
    tiled = min(s_kv, -(-exact // TILE) * TILE)
    return {"exact": exact} if tiled == exact else {"exact": exact, "x128": tiled}


def random_lists(g: int, s_kv: int, count: int, gen: torch.Generator):
    """(indices (B, H, g, count) int32, counts (B, H, g) int32): per query group ``count``
    distinct columns, uniformly at random, in increasing order; all columns in order when
    count = S_kv. Made one head at a time (a (g, S_kv) fp32 draw each)."""
    counts = torch.full((B, H, g), count, dtype=torch.int32, device=DEVICE)
    if count == s_kv:
        cols = torch.arange(s_kv, dtype=torch.int32, device=DEVICE)
        return cols.expand(B, H, g, s_kv).contiguous(), counts
    indices = torch.empty(B, H, g, count, dtype=torch.int32, device=DEVICE)
    for b in range(B):
        for h in range(H):
            draw = torch.rand(g, s_kv, device=DEVICE, generator=gen)
            top = draw.topk(count, dim=1, sorted=False).indices
            indices[b, h] = top.sort(dim=1).values.to(torch.int32)
    return indices, counts


def spot_error(q, k, v, indices, counts, o) -> float:
    """max |o - float32 reference| over query groups 0, 1 and the last one of head 0."""
    from cute_kernels.ops.column_sparse import column_sparse_attention_reference

    g, s_q = indices.shape[2], q.shape[2]
    err = 0.0
    for g0, g1 in ((0, min(2, g)), (g - 1, g)):
        rows = slice(g0 * GROUP, min(g1 * GROUP, s_q))
        want, _ = column_sparse_attention_reference(
            q[:1, :1, rows], k[:1, :1], v[:1, :1], indices[:1, :1, g0:g1],
            counts[:1, :1, g0:g1], group=GROUP)
        err = max(err, (o[:1, :1, rows].float() - want).abs().max().item())
    return err


# ---------------------------------------------------------------------------------------------
# 1. the sparsity sweep


def sweep(s: int, quick: bool) -> dict:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import cute_kernels as ck
    from cute_kernels.ops.column_sparse import column_sparse_attention

    g = groups(s)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    per_set = 3 * B * H * s * D * 2
    sets = [tuple(torch.randn(B, H, s, D, device=DEVICE, generator=gen).bfloat16()
                  for _ in range(3)) for _ in range(input_sets_needed(per_set))]

    def cudnn(x):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*x)

    fns = {"SDPA-cuDNN": cudnn, "cute dense": lambda x: ck.attention(*x)}
    configs = {}  # name -> (p, rule, count)
    lists = {}
    for p in SPARSITIES:
        for rule, count in counts_for(p, s).items():
            name = f"gather p={p} {rule}"
            configs[name] = (p, rule, count)
            lists[name] = random_lists(g, s, count, gen)
            fns[name] = (lambda idx, cnt: lambda x: column_sparse_attention(
                *x, idx, cnt, group=GROUP))(*lists[name])
    errors = {}
    for name in list(fns):  # a contender that cannot run this shape is left out, not fatal
        try:
            o = fns[name](sets[0])
            if name in configs:
                errors[name] = spot_error(*sets[0], *lists[name], o)
            del o
        except (RuntimeError, ValueError, NotImplementedError) as err:
            print(f"skip {name}: {str(err).splitlines()[0]}")
            del fns[name]
    timings = bench_interleaved(fns, sets, rounds=15 if quick else 10,
                                warmup=2 if quick else 1)
    del sets, lists
    torch.cuda.empty_cache()

    def ms(name):
        return timings[name].median_ms if name in timings else float("nan")

    headers = ["sparsity", "counts", "count", "ms", "TFLOP/s", "vs cuDNN", "vs ours",
               "ideal S/count", "of ideal", "max err"]
    table = []
    for name, (p, rule, count) in configs.items():
        t = ms(name)
        ideal = s / count
        table.append([p, rule, count, t, 4.0 * B * H * s * count * D / (t * 1e-3) / 1e12,
                      ms("SDPA-cuDNN") / t, ms("cute dense") / t, ideal,
                      ms("cute dense") / t / ideal, errors.get(name, float("nan"))])
    dense_flops = 4.0 * B * H * s * s * D
    dense = {n: {"ms": ms(n), "tflops": dense_flops / (ms(n) * 1e-3) / 1e12}
             for n in ("SDPA-cuDNN", "cute dense")}
    all_cols = ms("cute dense") / ms("gather p=0.0 exact")
    print(f"\n## 1. column_sparse_attention, B{B} H{H} S{s} D{D}, group {GROUP}, random "
          f"[{GROUP}, 1] columns\n")
    print("dense: " + ", ".join(f"{n} {d['ms']:.3f} ms ({d['tflops']:.0f} TFLOP/s)"
                                for n, d in dense.items()))
    print(format_table(headers, table))
    print(f"all columns (p = 0): gather / our dense = {all_cols:.3f}x "
          f"(bar >= {GATHER_BAR}: {'met' if all_cols >= GATHER_BAR else 'NOT met'})")
    return {"shape": [B, H, s, D], "group": GROUP, "dense": dense, "headers": headers,
            "rows": table, "gather_over_dense": all_cols, "bar": GATHER_BAR,
            "timings": Row(f"B{B} H{H} S{s} D{D}", timings)}


def plot_sweep(out: str, result: dict) -> None:
    by = {(row[1], row[0]): row for row in result["rows"]}  # (counts rule, p) -> row

    def series(rule, col):  # p = 0 has one row (both rules give every column)
        return [(by.get((rule, p)) or by.get(("exact", p)) or [float("nan")] * 10)[col]
                for p in SPARSITIES]

    png = plot_lines(
        f"{out}/column_sparse_speedup.png",
        f"column-sparse attention, B{B} H{H} S{result['shape'][2]} D{D}, group {GROUP}: "
        f"speedup over dense ({device_name()})", [str(p) for p in SPARSITIES],
        {"vs our dense, exact counts": series("exact", 6),
         "vs our dense, counts x128": series("x128", 6),
         "vs SDPA-cuDNN, exact counts": series("exact", 5),
         "ideal 1 / (1 - p)": [1 / (1 - p) for p in SPARSITIES]},
        "speedup (x)")
    if png:
        print("wrote", png)


# ---------------------------------------------------------------------------------------------
# 4. index lists from a bitpacked mask


def lists_run(s: int, quick: bool) -> dict:
    import cute_kernels as ck
    from cute_kernels.ops.column_lists import column_counts, column_lists

    rows = H * groups(s)
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    mask = torch.rand(rows, s, device=DEVICE, generator=gen) >= STEP_SPARSITY
    packed = ck.pack_mask(mask)
    del mask
    counts, _, largest = column_counts(packed, s, TILE)
    width = int(largest)
    want, _ = ck.column_indices(packed, group=GROUP, multiple_of=TILE, n=s)
    got = column_lists(packed, counts, s, width)
    same = bool(torch.equal(got, want))
    moved = packed.numel() + got.numel() * 4
    src = torch.empty(moved, dtype=torch.uint8, device=DEVICE)
    fns = {"column_lists kernel": lambda x: column_lists(packed, counts, s, width),
           "column_counts kernel": lambda x: column_counts(packed, s, TILE),
           "column_indices (op: counts + kernel)": lambda x: ck.column_indices(
               packed, group=GROUP, multiple_of=TILE, n=s),
           "copy": lambda x: src.clone()}
    t = bench_interleaved(fns, [()], rounds=15 if quick else 10, warmup=2)
    ms = {n: t[n].median_ms for n in fns}
    share = ms["copy"] / ms["column_lists kernel"]
    op_share = ms["copy"] / ms["column_indices (op: counts + kernel)"]
    print(f"\n## 4. index lists from a bitpacked mask, {rows} x {s}, 93%, multiple_of {TILE}\n")
    print(format_table(["contender", "ms", "GB/s"],
                       [[n, v, moved / (v * 1e-3) / 1e9] for n, v in ms.items()]))
    print(f"kernel = op: {same}; lists kernel at {share:.2f} of copy bandwidth, the op "
          f"(counts, sync, lists) at {op_share:.2f} (bar >= 0.5)")
    return {"rows": rows, "n": s, "ms": ms, "equal": same, "copy_share": share,
            "op_copy_share": op_share,
            "timings": Row(f"{rows}x{s}", t)}


# ---------------------------------------------------------------------------------------------
# 2. top-k


def recall(scores: torch.Tensor, ours: torch.Tensor, k: int) -> tuple[float, float, float, float]:
    """(mean, worst-row) recall of ``ours`` (R, k) against torch.topk's set, and (mean, worst)
    share of ours at or above the row's k-th largest score; in row chunks."""
    sums, worst = [0.0, 0.0], [1.0, 1.0]
    step = max(1, (1 << 26) // scores.shape[1])
    for start in range(0, scores.shape[0], step):
        x = scores[start:start + step].float()
        mine = ours[start:start + step].long()
        top = x.topk(k, dim=1)
        exact = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
        exact.scatter_(1, top.indices, True)
        hit = exact.gather(1, mine).float().mean(1)
        above = (x.gather(1, mine) >= top.values[:, -1:]).float().mean(1)
        for i, r in enumerate((hit, above)):
            sums[i] += r.sum().item()
            worst[i] = min(worst[i], r.min().item())
    n = scores.shape[0]
    return sums[0] / n, worst[0], sums[1] / n, worst[1]


def topk(s: int, quick: bool) -> dict:
    from cute_kernels.ops.column_sparse import topk_indices, topk_indices_reference

    shapes = [(H * groups(s), s), *TOPK_EXTRA_SHAPES]
    headers = ["scores (R x N)", "dtype", "k", "ours ms", "torch.topk ms", "reference ms",
               "vs torch.topk", "vs reference", "recall", "recall worst", "at/above k-th",
               "at/above worst"]
    table, rows = [], []
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    for r, n in shapes:
        k = max(1, math.ceil(TOPK_KEEP * n - 1e-9))
        for dtype in (torch.bfloat16, torch.float32):
            per_set = r * n * torch.finfo(dtype).bits // 8
            sets = [torch.randn(r, n, device=DEVICE, generator=gen).to(dtype)
                    for _ in range(input_sets_needed(per_set))]
            fns = {"ours": lambda x, k=k: topk_indices(x, k),
                   "torch.topk": lambda x, k=k: x.topk(k, dim=-1, sorted=False),
                   "reference": lambda x, k=k: topk_indices_reference(x, k)}
            quality = recall(sets[0], fns["ours"](sets[0])[0], k)
            t = bench_interleaved(fns, sets, rounds=15 if quick else 10, warmup=2)
            ms = {name: t[name].median_ms for name in fns}
            label = f"{r}x{n}"
            table.append([label, str(dtype).removeprefix("torch."), k, ms["ours"],
                          ms["torch.topk"], ms["reference"], ms["torch.topk"] / ms["ours"],
                          ms["reference"] / ms["ours"], *quality])
            rows.append(Row(f"{label} {dtype}", t))
            del sets
            torch.cuda.empty_cache()
    print(f"\n## 2. topk_indices vs torch.topk, k = {TOPK_KEEP:.0%} of N, N(0, 1) scores\n")
    print(format_table(headers, table))
    return {"headers": headers, "rows": table, "timings": rows}


# ---------------------------------------------------------------------------------------------
# 3. ColumnSparseAttention over a synthetic sequence


def synthetic_steps(s: int, steps: int, seed: int = 2):
    """Yields (q, k, v) bf16 for steps 0 .. steps - 1 (module docstring, part 3); the same
    sequence for the same seed."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    g = groups(s)

    def randn(*shape):
        return torch.randn(*shape, device=DEVICE, generator=gen)

    u = randn(B, H, g, 1, D).expand(B, H, g, GROUP, D).reshape(B, H, g * GROUP, D)[:, :, :s]
    q = (Q_STD * (u + Q_NOISE * randn(B, H, s, D)) / math.sqrt(1 + Q_NOISE ** 2)).bfloat16()
    k, v = randn(B, H, s, D).bfloat16(), randn(B, H, s, D).bfloat16()
    del u
    for step in range(steps):
        if step:
            q = (q.float() + DRIFT * Q_STD * randn(B, H, s, D)).bfloat16()
            k = (k.float() + DRIFT * randn(B, H, s, D)).bfloat16()
            v = (v.float() + DRIFT * randn(B, H, s, D)).bfloat16()
        yield q, k, v


def rel_err(o: torch.Tensor, want: torch.Tensor) -> float:
    return ((o.float() - want.float()).norm() / want.float().norm()).item()


def timed(fn, *args):
    """(fn(*args), its time in ms): one call between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    out = fn(*args)
    end.record()
    torch.cuda.synchronize()
    return out, start.elapsed_time(end)


def steps_run(s: int, steps: int) -> dict:
    import cute_kernels as ck
    from cute_kernels.column_sparse_module import ColumnSparseAttention
    from cute_kernels.ops.column_sparse import column_sparse_attention

    def modules():
        return {mode: ColumnSparseAttention(
            group=GROUP, sparsity=STEP_SPARSITY, dense_steps=DENSE_STEPS,
            refresh_every=REFRESH_EVERY, bitpacked_mask=mode == "mask",
            generator=torch.Generator(device=DEVICE).manual_seed(3)) for mode in ("lists", "mask")}

    headers = ["step", "kind", "lists ms", "mask ms", "dense ms", "speedup", "rel err",
               "stale err", "no-cache err", "mask = lists"]
    for timed_pass in (False, True):  # the first pass compiles and warms up
        mods, table, stale = modules(), [], None
        for step, (q, k, v) in enumerate(synthetic_steps(s, steps)):
            o, t_lists = timed(mods["lists"], q, k, v, step)
            o_mask, t_mask = timed(mods["mask"], q, k, v, step)
            want, t_dense = timed(ck.attention, q, k, v)
            dense = mods["lists"].is_dense(step)
            if dense:
                stale, no_cache = o, float("nan")
            else:
                no_cache = rel_err(column_sparse_attention(
                    q, k, v, *mods["lists"].index_lists(), group=GROUP), want)
            table.append([step, "dense" if dense else "sparse", t_lists, t_mask, t_dense,
                          t_dense / t_lists, rel_err(o, want), rel_err(stale, want),
                          no_cache, bool(torch.equal(o, o_mask))])
            del o, o_mask, want
        if timed_pass:
            memory = {mode: m.state_bytes() for mode, m in mods.items()}
        del mods, stale
        torch.cuda.empty_cache()
    sparse = [r for r in table if r[1] == "sparse"]
    summary = {"mean sparse-step ms (lists)": sum(r[2] for r in sparse) / max(1, len(sparse)),
               "mean sparse-step ms (mask)": sum(r[3] for r in sparse) / max(1, len(sparse)),
               "mean dense ms": sum(r[4] for r in table) / len(table),
               "sequence ms (lists)": sum(r[2] for r in table),
               "sequence ms (mask)": sum(r[3] for r in table),
               "sequence ms (all dense)": sum(r[4] for r in table)}
    print(f"\n## 3. ColumnSparseAttention over {steps} steps, B{B} H{H} S{s} D{D}, sparsity "
          f"{STEP_SPARSITY}, dense at steps < {DENSE_STEPS} and multiples of {REFRESH_EVERY}, "
          f"drift {DRIFT}\n")
    print(format_table(headers, table))
    for name, value in summary.items():
        print(f"{name}: {value:.3f}")
    for mode, sizes in memory.items():
        print(f"state ({mode}): " + ", ".join(f"{part} {b / 2**20:.1f} MiB"
                                              for part, b in sizes.items()))
    return {"headers": headers, "rows": table, "summary": summary, "state_bytes": memory,
            "config": {"sparsity": STEP_SPARSITY, "dense_steps": DENSE_STEPS,
                       "refresh_every": REFRESH_EVERY, "drift": DRIFT, "q_std": Q_STD,
                       "q_noise": Q_NOISE}}


def plot_steps(out: str, result: dict) -> None:
    rows = result["rows"]
    png = plot_lines(f"{out}/column_sparse_steps.png",
                     f"ColumnSparseAttention: error against dense attention per step "
                     f"({device_name()})", [f"{r[0]} {r[1]}" for r in rows],
                     {"module (cache + sparse delta)": [r[6] for r in rows],
                      "stale (last dense output)": [r[7] for r in rows],
                      "sparse attention without the cache": [r[8] for r in rows]},
                     "||o - o_dense|| / ||o_dense||")
    if png:
        print("wrote", png)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"S = {QUICK_SEQ}, more rounds")
    ap.add_argument("--seq", type=int, default=None, help=f"S (default {SEQ})")
    ap.add_argument("--parts", default="sweep,topk,steps,lists")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    unknown = set(parts) - {"sweep", "topk", "steps", "lists"}
    if unknown:
        ap.error(f"unknown --parts {sorted(unknown)}: pick from sweep, topk, steps, lists")
    require_gpu()
    from cute_kernels import force_path

    s = args.seq or (QUICK_SEQ if args.quick else SEQ)
    print(f"{device_name()} | path {args.path or 'native'} | commit {commit_id()} | "
          f"torch {torch.__version__} | {datetime.date.today()}")
    payload = {"device": device_name(), "commit": commit_id(), "torch": torch.__version__,
               "date": str(datetime.date.today()), "path": args.path or "native", "seq": s}
    with force_path(args.path):
        if "sweep" in parts:
            payload["sweep"] = sweep(s, args.quick)
        if "topk" in parts:
            payload["topk"] = topk(s, args.quick)
        if "steps" in parts:
            payload["steps"] = steps_run(s, args.steps)
        if "lists" in parts:
            try:  # a kernel not yet GPU-verified: its failure must not lose the other parts
                payload["lists"] = lists_run(s, args.quick)
            except (RuntimeError, ValueError) as err:
                print(f"\nskip lists: {str(err).splitlines()[0]}")
    print("\nwrote", save_results(args.out, "column_sparse", payload))
    if "sweep" in payload:
        plot_sweep(args.out, payload["sweep"])
    if "steps" in payload:
        plot_steps(args.out, payload["steps"])


if __name__ == "__main__":
    main()
