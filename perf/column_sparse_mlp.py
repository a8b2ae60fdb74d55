"""The column-sparse MLP delta (issue 16) on a GPU: ``column_sparse_mlp`` against the dense MLP,
``scatter_add`` against torch's scatter / index_add, and ``scatter_add`` on a few SMs next to a
GEMM.

    python perf/column_sparse_mlp.py [--quick] [--m M] [--parts mlp,scatter,concurrent]
                                     [--path hopper|ampere] [--power SECONDS]
                                     [--out perf/results]

Shape: HunyuanVideo's MLP, M = 118,784 tokens (``--quick``: 16,384), K = D = 3072,
F = 12,288, bf16, GELU-tanh, group 128. At sparsity p every group lists count =
ceil((1 - p) F) columns: distinct, uniformly at random, sorted ascending (as a top-k gives
them after sorting), every count the same.

1. ``mlp``: ``column_sparse_mlp`` at p = 0.8, 0.9, 0.93, 0.97 (quick: 0.93) with an m-major
   act_cache (``torch.empty(F, M).t()``) and w2 as a column-major view (``w2t.t()``), plus
   p = 0.93 with a row-major act_cache (the layout's cost), against the dense MLP
   ``F.linear(x, w1, b1)`` -> ``F.gelu(approximate="tanh")`` -> ``F.linear(h, w2, b2)``
   (cuBLAS, nn.Linear's weight storage), all in one interleaved timing loop. Columns: ms,
   the TFLOP/s of the work done (2 M count (K + D) / time), the speed-up over dense, the
   ideal 1 / (1 - p) and the share of it reached; ``err``: a first-run check, the relative
   error of the out_cache change over groups 0, 1 and the last against the float32
   reference. The op updates its caches in place on every call: the timed calls keep
   updating the same caches (values drift but stay finite; nothing is re-randomised, and
   nothing in the kernels depends on the values). Bar: >= 5x dense at p = 0.93.
2. ``scatter``: the act_cache writeback alone at p = 0.93, ``scatter_add(src (M, count),
   act_cache, ...)``, both act_cache layouts, against the fastest plain torch we have for the
   same update: ``scatter_add_`` over a (G, group, F) view with the lists expanded over the
   group's rows, and ``index_add_`` on the flat cache with precomputed flat indices (index
   building outside the timed region; every count is L here, so no masking is needed). Both
   torch forms and ours are checked against ``scatter_add_reference`` on a small problem
   first. Also ours on an m-major cache from a source whose rows are 16-byte aligned (a
   packed buffer padded to 8 columns: the 16-byte-load variant) and from an M-major source
   (bulk copies in, bulk reductions out). Bar: ours >= 2x the faster torch form.
3. ``concurrent``: mm2 alone (``_run_down``: out_cache += delta @ W2[:, idx]^T at p = 0.93,
   the op's second kernel) against mm2 on the main SMs of an ``SmPartition`` with the
   act_cache writeback (``scatter_add``, m-major, a padded source) on its side SMs (green
   contexts with 8 and 16 side SMs, fine-grained with 4 and 6, plain streams with 8 and 16),
   the writeback by bulk copies, by vector ``red.global`` and by 16-byte read-add-writes
   (``SCATTER_ADDER``: bulk, red, rmw), on green side SMs also the bulk writeback with two
   transposed-tile buffers per CTA instead of one (``SCATTER_ONE_BUFFER``) and from an M-major
   source (bulk copies in, bulk reductions out); also each side
   alone in the partition (what losing the SMs costs mm2, and the writeback's GB/s on few
   SMs) and torch.mm (M, L8) x (L8, D) beside the writeback. Bar: the best partitioned run
   <= 1.05x mm2 alone. ``--power S``: mm2, the writeback and the first partition's runs
   also back to back for S seconds each under ``nvidia-smi`` (SM clock, board power).
4. ``gated``: SwiGLU on ``pack_gated_weight``'s (2F, K) rows at p = 0.93 against the dense
   gated MLP on the same packed weight (no bar: the issue asks for its speed).

Method: cute_kernels/bench.py (interleaved contenders, warm-up, medians; one input set, every
operand bigger than twice the L2 at the default M). Needs a CUDA GPU and about 16 GB of its
memory at the full size (act_cache 2.9 GB per layout, the dense intermediate 2.9 GB twice).
Writes column_sparse_mlp.json and column_sparse_mlp_speedup.png (speed-up over dense against
p, beside the ideal 1 / (1 - p)) into --out. docs/column_sparse_mlp.md has the contract.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import math
import sys

import torch
import torch.nn.functional as F

from cute_kernels.bench import (
    Row,
    bench_interleaved,
    commit_id,
    device_name,
    format_table,
    plot_lines,
    save_results,
)

DEVICE = "cuda"
M, QUICK_M = 118784, 16384
K, D, FF = 3072, 3072, 12288
GROUP = 128
ACTIVATION = "gelu_tanh"
SPARSITIES, QUICK_SPARSITIES = (0.8, 0.9, 0.93, 0.97), (0.93,)
P_LAYOUT = 0.93  # the row-major act_cache row, the scatter and concurrent parts
DENSE_BAR, SCATTER_BAR, CONCURRENT_BAR = 5.0, 2.0, 1.05
#: (mode, side SMs, fine_grained) of the concurrent part's SmPartitions
PARTITIONS = (("green", 8, False), ("green", 16, False), ("green", 4, True), ("green", 6, True),
              ("streams", 8, False), ("streams", 16, False))
PARTS = ("mlp", "scatter", "concurrent", "gated")
#: the writeback's adders in the concurrent part (ops.column_sparse_mlp.SCATTER_ADDER)
ADDERS = ("bulk", "red", "rmw")


def require_gpu() -> None:
    if not torch.cuda.is_available():
        sys.exit("perf/column_sparse_mlp.py needs a CUDA GPU and torch.cuda.is_available() is "
                 "False here: run it on a GPU machine (docs/gpu.md)")


def ops():
    """The ops' module (``column_sparse_mlp``, ``scatter_add`` and their references)."""
    mod = importlib.import_module("cute_kernels.ops.column_sparse_mlp")
    missing = [n for n in ("column_sparse_mlp", "scatter_add") if not hasattr(mod, n)]
    if missing:
        sys.exit(f"cute_kernels.ops.column_sparse_mlp has no {' / '.join(missing)} yet: "
                 f"nothing to measure")
    return mod


def count_for(p: float, f: int | None = None) -> int:
    f = FF if f is None else f
    return min(f, max(1, math.ceil((1 - p) * f - 1e-9)))


def groups(m: int) -> int:
    return -(-m // GROUP)


def random_lists(m: int, count: int, gen: torch.Generator, f: int | None = None):
    """(indices (G, count) int32, counts (G,) int32): per group ``count`` distinct columns of
    F, uniformly at random, in increasing order."""
    f = FF if f is None else f
    g = groups(m)
    indices = torch.empty(g, count, dtype=torch.int32, device=DEVICE)
    step = max(1, (1 << 26) // f)
    for start in range(0, g, step):  # (rows, F) fp32 draws, at most 256 MB each
        draw = torch.rand(min(step, g - start), f, device=DEVICE, generator=gen)
        top = draw.topk(count, dim=1, sorted=False).indices
        indices[start:start + step] = top.sort(dim=1).values.to(torch.int32)
    return indices, torch.full((g,), count, dtype=torch.int32, device=DEVICE)


def normal(*shape, gen, std=1.0, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device=DEVICE).normal_(0.0, std, generator=gen)


def m_major(m: int, f: int, gen) -> torch.Tensor:
    """An (M, F) random cache in m-major layout: ``torch.empty(F, M).t()``."""
    return normal(f, m, gen=gen, std=0.5).t()


def ms_of(timings, name: str) -> float:
    return timings[name].median_ms if name in timings else float("nan")


def first_calls(fns: dict, skipped: dict) -> None:
    """Run each contender once; one that cannot run this shape is left out, not fatal."""
    for name in list(fns):
        try:
            fns[name](None)
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as err:
            skipped[name] = str(err).splitlines()[0][:200]
            print(f"skip {name}: {skipped[name]}")
            del fns[name]
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# 1. column_sparse_mlp against the dense MLP


def spot_error(op, x, w1, b1, w2, indices, counts, act, out, activation=ACTIVATION) -> float:
    """One call of ``op`` on the caches; the relative error of the out_cache change over groups
    0, 1 and the last against the float32 reference (a first-run check)."""
    mod = ops()
    g, m = indices.shape[0], x.shape[0]
    spans = [(0, min(2, g)), (g - 1, g)] if g > 2 else [(0, g)]
    before = [(act[g0 * GROUP:min(g1 * GROUP, m)].clone(),
               out[g0 * GROUP:min(g1 * GROUP, m)].clone()) for g0, g1 in spans]
    op()
    torch.cuda.synchronize()
    num = den = 0.0
    for (g0, g1), (act0, out0) in zip(spans, before):
        rows = slice(g0 * GROUP, min(g1 * GROUP, m))
        want, _ = mod.column_sparse_mlp_reference(
            x[rows], w1, b1, w2, indices[g0:g1], counts[g0:g1], act0, out0, group=GROUP,
            activation=activation)
        change = want - out0.float()
        num += (out[rows].float() - want).norm().item() ** 2
        den += change.norm().item() ** 2
    return math.sqrt(num / max(den, 1e-30))


def mlp_part(m: int, sparsities, rounds: int, gen) -> dict:
    mod = ops()
    x = normal(m, K, gen=gen)
    w1 = normal(FF, K, gen=gen, std=K ** -0.5)
    b1 = normal(FF, gen=gen, std=0.1)
    w2t = normal(FF, D, gen=gen, std=FF ** -0.5)
    w2 = w2t.t()  # (D, F) column-major view: what the op takes without a transpose
    w2_linear = w2.contiguous()  # nn.Linear storage, for the dense MLP
    b2 = normal(D, gen=gen, std=0.1)
    act_m = m_major(m, FF, gen)
    out_cache = normal(m, D, gen=gen)
    act_row = None

    def dense(_):
        h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
        return F.linear(h, w2_linear, b2)

    def ours(indices, counts, act):
        return lambda _: mod.column_sparse_mlp(x, w1, b1, w2, indices, counts, act, out_cache,
                                               group=GROUP, activation=ACTIVATION)

    fns = {"dense MLP (cuBLAS)": dense}
    configs = {}  # name -> (p, layout, count)
    lists = {}
    for p in sparsities:
        layouts = ("m-major", "row-major") if p == P_LAYOUT else ("m-major",)
        count = count_for(p)
        lists[p] = random_lists(m, count, gen)
        for layout in layouts:
            if layout == "row-major":
                act_row = normal(m, FF, gen=gen, std=0.5)
            act = act_m if layout == "m-major" else act_row
            name = f"ours p={p} act {layout}"
            configs[name] = (p, layout, count)
            fns[name] = ours(*lists[p], act)
    errors, skipped = {}, {}
    for name, (p, layout, _) in configs.items():
        act = act_m if layout == "m-major" else act_row
        try:
            errors[name] = spot_error(lambda name=name: fns[name](None), x, w1, b1, w2,
                                      *lists[p], act, out_cache)
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as err:
            skipped[name] = str(err).splitlines()[0][:200]
            print(f"skip {name}: {skipped[name]}")
            del fns[name]
    first_calls(fns, skipped)
    timings = bench_interleaved(fns, [None], rounds=rounds, warmup=2)
    dense_ms = ms_of(timings, "dense MLP (cuBLAS)")
    headers = ["p", "act_cache", "count", "ms", "TFLOP/s", "dense ms", "speed-up",
               "ideal 1/(1-p)", "of ideal", "err"]
    table = []
    for name, (p, layout, count) in configs.items():
        t = ms_of(timings, name)
        ideal = 1 / (1 - p)
        table.append([p, layout, count, t, 2.0 * m * count * (K + D) / (t * 1e-3) / 1e12,
                      dense_ms, dense_ms / t, ideal, dense_ms / t / ideal,
                      errors.get(name, float("nan"))])
    dense_tflops = 4.0 * m * K * FF / (dense_ms * 1e-3) / 1e12
    print(f"\n## 1. column_sparse_mlp vs the dense MLP, M {m}, K {K}, F {FF}, D {D}, bf16, "
          f"{ACTIVATION}, group {GROUP}, w2 column-major view\n")
    print(f"dense MLP: {dense_ms:.3f} ms ({dense_tflops:.0f} TFLOP/s over both GEMMs)")
    print(format_table(headers, table))
    at_bar = [r for r in table if r[0] == P_LAYOUT and r[1] == "m-major"]
    verdict = None
    if at_bar:
        verdict = at_bar[0][6] >= DENSE_BAR
        print(f"p {P_LAYOUT}, m-major: {at_bar[0][6]:.2f}x dense (bar >= {DENSE_BAR}x: "
              f"{'met' if verdict else 'NOT met'})")
    return {"shape": {"M": m, "K": K, "F": FF, "D": D}, "group": GROUP,
            "activation": ACTIVATION, "dense_ms": dense_ms, "dense_tflops": dense_tflops,
            "headers": headers, "rows": table, "bar": DENSE_BAR, "bar_met": verdict,
            "skipped": skipped, "timings": Row(f"M{m}", timings)}


def gated_part(m: int, rounds: int, gen) -> dict:
    """The gated form (SwiGLU on ``pack_gated_weight``'s interleaved rows) at p 0.93 against
    the dense gated MLP: one (M, 2F) ``F.linear`` on the same packed weight, silu(gate) * up,
    ``F.linear`` down (cuBLAS)."""
    mod = ops()
    count = count_for(P_LAYOUT)
    x = normal(m, K, gen=gen)
    w1 = normal(2 * FF, K, gen=gen, std=K ** -0.5)  # packed rows: up even, gate odd
    w2t = normal(FF, D, gen=gen, std=FF ** -0.5)
    w2, w2_linear = w2t.t(), w2t.t().contiguous()
    act, out_cache = m_major(m, FF, gen), normal(m, D, gen=gen)
    indices, counts = random_lists(m, count, gen)

    def dense(_):
        gate_up = F.linear(x, w1).unflatten(-1, (FF, 2))
        return F.linear(F.silu(gate_up[..., 1]) * gate_up[..., 0], w2_linear)

    def ours(_):
        return mod.column_sparse_mlp(x, w1, None, w2, indices, counts, act, out_cache,
                                     group=GROUP, activation="swiglu")

    err = spot_error(lambda: ours(None), x, w1, None, w2, indices, counts, act, out_cache,
                     activation="swiglu")
    fns, skipped = {"dense gated MLP (cuBLAS)": dense, "ours swiglu": ours}, {}
    first_calls(fns, skipped)
    timings = bench_interleaved(fns, [None], rounds=rounds, warmup=2)
    dense_ms, ours_ms = ms_of(timings, "dense gated MLP (cuBLAS)"), ms_of(timings, "ours swiglu")
    ideal = 1 / (1 - P_LAYOUT)
    row = [P_LAYOUT, count, ours_ms, dense_ms, dense_ms / ours_ms, ideal,
           dense_ms / ours_ms / ideal, err]
    headers = ["p", "count", "ours ms", "dense ms", "speed-up", "ideal", "of ideal", "err"]
    print(f"\n## 4. gated form (swiglu, w1 (2F, K) packed), M {m}, K {K}, F {FF}, D {D}\n")
    print(format_table(headers, [row]))
    return {"headers": headers, "rows": [row], "skipped": skipped,
            "timings": Row(f"M{m}", timings)}


def plot_mlp(out: str, result: dict) -> None:
    rows = [r for r in result["rows"] if r[1] == "m-major"]
    png = plot_lines(f"{out}/column_sparse_mlp_speedup.png",
                     f"column_sparse_mlp over the dense MLP, M {result['shape']['M']}, "
                     f"K=D {K}, F {FF}, group {GROUP} ({device_name()})",
                     [str(r[0]) for r in rows],
                     {"ours (m-major act_cache)": [r[6] for r in rows],
                      "ideal 1 / (1 - p)": [r[7] for r in rows]},
                     "speed-up over dense (x)", hline=(f"bar {DENSE_BAR:g}x at p {P_LAYOUT}",
                                                       DENSE_BAR))
    if png:
        print("wrote", png)
    else:
        print("matplotlib missing: no PNG written")


# ---------------------------------------------------------------------------------------------
# 2. scatter_add against torch


def torch_scatter(dest, src, indices, layout: str):
    """The ``scatter_add_`` form: one call over a (G, group, F) view (row-major) or the
    (F, G, group) view of dest.t() (m-major), the lists expanded over each group's rows
    (views, no copies). Needs M a multiple of the group."""
    g, width = indices.shape
    idx = indices.long()
    if layout == "row-major":
        index = idx[:, None, :].expand(g, GROUP, width)
        source = src.view(g, GROUP, width)
        return lambda _: dest.view(g, GROUP, -1).scatter_add_(2, index, source)
    index = idx.t()[:, :, None].expand(width, g, GROUP)
    source = src.view(g, GROUP, width).permute(2, 0, 1)
    return lambda _: dest.t().view(-1, g, GROUP).scatter_add_(0, index, source)


def torch_index_add(dest, src, indices, layout: str):
    """The ``index_add_`` form on the flat cache: flat indices (M * L) built once, int32 where
    M * F fits."""
    m, f = dest.shape
    dtype = torch.int32 if m * f < 2 ** 31 else torch.int64
    cols = indices.to(dtype).repeat_interleave(GROUP, dim=0)[:m]
    rows = torch.arange(m, device=DEVICE, dtype=dtype)[:, None]
    flat = (rows * f + cols if layout == "row-major" else cols * m + rows).view(-1)
    values = src.reshape(-1)
    target = dest.view(-1) if layout == "row-major" else dest.t().view(-1)
    return lambda _: target.index_add_(0, flat, values)


def check_scatter_forms(gen) -> dict:
    """Max |error| of ours and both torch forms against ``scatter_add_reference`` on a small
    problem (4 groups, F 1024, L 77), per layout."""
    mod = ops()
    m, f, width = 4 * GROUP, 1024, 77
    indices, counts = random_lists(m, width, gen, f=f)
    src = normal(m, width, gen=gen)
    errors = {}
    for layout in ("row-major", "m-major"):
        base = normal(m, f, gen=gen) if layout == "row-major" else m_major(m, f, gen)
        want = mod.scatter_add_reference(src, base, indices, counts, group=GROUP)
        for form in ("ours", "torch scatter_add_", "torch index_add_"):
            dest = base.clone() if layout == "row-major" else base.t().clone().t()
            try:
                if form == "ours":
                    mod.scatter_add(src, dest, indices, counts, group=GROUP)
                elif form == "torch scatter_add_":
                    torch_scatter(dest, src, indices, layout)(None)
                else:
                    torch_index_add(dest, src, indices, layout)(None)
                errors[f"{form}, {layout}"] = (dest.float() - want).abs().max().item()
            except (RuntimeError, ValueError, TypeError, NotImplementedError) as err:
                errors[f"{form}, {layout}"] = f"failed: {str(err).splitlines()[0][:160]}"
    return errors


def scatter_part(m: int, rounds: int, gen) -> dict:
    mod = ops()
    count = count_for(P_LAYOUT)
    indices, counts = random_lists(m, count, gen)
    src = normal(m, count, gen=gen)
    src_rows16 = normal(m, -(-count // 8) * 8, gen=gen)[:, :count]  # a padded packed buffer
    src_m = normal(count, m, gen=gen).t()  # M-major: bulk copies in, bulk reductions out
    dests = {"row-major": normal(m, FF, gen=gen, std=0.5), "m-major": m_major(m, FF, gen)}
    def ours(dest, source=src):
        return lambda _: mod.scatter_add(source, dest, indices, counts, group=GROUP)

    fns = {}
    for layout, dest in dests.items():
        fns[f"ours, {layout}"] = ours(dest)
        if layout == "m-major":
            fns["ours, m-major, src rows 16-byte aligned"] = ours(dest, src_rows16)
            fns["ours, m-major, src M-major"] = ours(dest, src_m)
        if m % GROUP == 0:
            fns[f"torch scatter_add_, {layout}"] = torch_scatter(dest, src, indices, layout)
        fns[f"torch index_add_, {layout}"] = torch_index_add(dest, src, indices, layout)
    skipped = {}
    first_calls(fns, skipped)
    timings = bench_interleaved(fns, [None], rounds=rounds, warmup=2)
    moved = m * count * (2 * 2 + 2)  # dest entries read + written, src read (bf16)
    headers = ["act_cache", "ours ms", "GB/s", "torch scatter_add_ ms", "torch index_add_ ms",
               "x best torch", "bar"]
    table, verdicts = [], {}
    for layout in dests:
        ours = ms_of(timings, f"ours, {layout}")
        best = min(ms_of(timings, f"torch scatter_add_, {layout}"),
                   ms_of(timings, f"torch index_add_, {layout}"))
        ratio = best / ours
        verdicts[layout] = ratio >= SCATTER_BAR
        table.append([layout, ours, moved / (ours * 1e-3) / 1e9,
                      ms_of(timings, f"torch scatter_add_, {layout}"),
                      ms_of(timings, f"torch index_add_, {layout}"), ratio,
                      f">= {SCATTER_BAR:g}x: {'met' if verdicts[layout] else 'NOT met'}"])
    best = min(ms_of(timings, "torch scatter_add_, m-major"),
               ms_of(timings, "torch index_add_, m-major"))
    for form in ("src rows 16-byte aligned", "src M-major"):
        ms = ms_of(timings, f"ours, m-major, {form}")
        table.append([f"m-major, {form}", ms, moved / (ms * 1e-3) / 1e9, "", "", best / ms,
                      f">= {SCATTER_BAR:g}x: {'met' if best / ms >= SCATTER_BAR else 'NOT met'}"])
    errors = check_scatter_forms(gen)
    print(f"\n## 2. scatter_add (the act_cache writeback), M {m}, F {FF}, L {count} "
          f"(p {P_LAYOUT}), group {GROUP}\n")
    print(format_table(headers, table))
    print("max |err| vs scatter_add_reference (4 groups, F 1024, L 77): " +
          ", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in errors.items()))
    return {"count": count, "headers": headers, "rows": table, "bar": SCATTER_BAR,
            "bar_met": verdicts, "check_errors": errors, "skipped": skipped,
            "timings": Row(f"M{m} L{count}", timings)}


# ---------------------------------------------------------------------------------------------
# 3. mm2 and the writeback on partitioned SMs (SmPartition)


def concurrent_part(m: int, rounds: int, gen, adders=ADDERS, partitions=PARTITIONS,
                    power: float = 0.0) -> dict:
    from cute_kernels.partition import SmPartition

    mod = ops()
    count = count_for(P_LAYOUT)
    indices, counts = random_lists(m, count, gen)
    src = normal(m, -(-count // 8) * 8, gen=gen)[:, :count]  # a padded packed buffer
    src_m = normal(count, m, gen=gen).t()  # an M-major source (bulk copies in)
    dest = m_major(m, FF, gen)
    padded = -(-count // mod.TILE_N) * mod.TILE_N
    delta = normal(m, padded, gen=gen, std=0.05)
    w2t = normal(FF, D, gen=gen, std=FF ** -0.5)
    out = normal(m, D, gen=gen)
    width = -(-count // 8) * 8
    a, b = normal(m, width, gen=gen), normal(width, D, gen=gen, std=width ** -0.5)
    c = torch.empty(m, D, dtype=torch.bfloat16, device=DEVICE)

    def mm2():
        mod._run_down(delta, w2t, indices, counts, out, GROUP)


    one_buffer_default = mod.SCATTER_ONE_BUFFER

    def writeback(adder: str = "bulk", one_buffer: bool | None = None, m_major_src=False):
        def run():
            mod.SCATTER_ADDER = adder  # how the transposed tiles are added into the cache
            # a launch of one CTA per tile: one smem buffer per CTA or two
            mod.SCATTER_ONE_BUFFER = one_buffer_default if one_buffer is None else one_buffer
            try:
                mod.scatter_add(src_m if m_major_src else src, dest, indices, counts,
                                group=GROUP)
            finally:
                mod.SCATTER_ADDER, mod.SCATTER_ONE_BUFFER = None, one_buffer_default
        return run

    def gemm():
        torch.mm(a, b, out=c)

    fns = {"mm2 alone": lambda _: mm2(), "torch.mm alone": lambda _: gemm(),
           **{f"writeback alone (all SMs), {w}": (lambda f: lambda _: f())(writeback(w))
              for w in adders},
           "writeback alone (all SMs), bulk, two buffers": (
               lambda f: lambda _: f())(writeback("bulk", False)),
           "writeback alone (all SMs), M-major source": (
               lambda f: lambda _: f())(writeback("bulk", m_major_src=True))}
    parts, info = {}, {}
    for mode, n, fine in partitions:
        try:
            part = SmPartition(n, mode=mode, fine_grained=fine)
        except RuntimeError as err:
            info[f"{mode} {n}"] = str(err)[:200]
            print(f"skip {mode} {n}: {err}")
            continue
        tag = f"{mode}{' fine' if fine else ''}, {part.side_sms} side SMs"
        if tag in parts:
            continue
        parts[tag] = part
        info[tag] = repr(part)
        fns[f"mm2 on the main SMs, {tag}"] = lambda _, p=part: p.run(mm2, lambda: None)
        for name in adders:
            wb = writeback(name)
            fns[f"mm2 + writeback, {name}, {tag}"] = lambda _, p=part, w=wb: p.run(mm2, w)
            fns[f"writeback, {name} on the side SMs, {tag}"] = \
                lambda _, p=part, w=wb: p.run(lambda: None, w)
        if mode == "green" and "bulk" in adders:  # one CTA per tile: one buffer or two
            for label, wb in (("two buffers", writeback("bulk", False)),
                              ("M-major source", writeback("bulk", m_major_src=True))):
                fns[f"mm2 + writeback, bulk, {label}, {tag}"] = (
                    lambda _, p=part, w=wb: p.run(mm2, w))
                fns[f"writeback, bulk, {label} on the side SMs, {tag}"] = (
                    lambda _, p=part, w=wb: p.run(lambda: None, w))
        if mode == "green" and n == 16:
            fns[f"torch.mm + writeback, {tag}"] = lambda _, p=part: p.run(gemm, writeback())
    skipped = {}
    first_calls(fns, skipped)
    timings = bench_interleaved(fns, [None], rounds=rounds, warmup=2)
    alone = ms_of(timings, "mm2 alone")
    moved = m * count * (2 * 2 + 2)
    rows = []
    for name in fns:
        ms = ms_of(timings, name)
        base = ms_of(timings, "torch.mm alone") if name.startswith("torch.mm") else alone
        rows.append([name, ms, ms / base,
                     moved / (ms * 1e-3) / 1e9 if name.startswith("writeback") else ""])
    best = min((ms_of(timings, n) for n in fns if n.startswith("mm2 + writeback")),
               default=float("nan"))
    ratio = best / alone
    met = ratio <= CONCURRENT_BAR
    print(f"\n## 3. mm2 (out_cache += delta @ W2[:, idx]^T, L {count}) and the act_cache "
          f"writeback (scatter_add, m-major) on partitioned SMs, M {m}\n")
    print(format_table(["contender", "ms", "x mm2 (torch.mm) alone", "writeback GB/s"], rows))
    print(f"best mm2 + writeback / mm2 alone = {ratio:.3f} (bar <= {CONCURRENT_BAR}: "
          f"{'met' if met else 'NOT met'})")
    power_rows = []
    if power:  # is the pair power-bound? SM clock and board power, each run back to back
        from gpu_power import sustained_rows
        first = next(iter(parts), None)
        names = ["mm2 alone", f"writeback alone (all SMs), {adders[0]}"]
        if first:
            names += [f"mm2 on the main SMs, {first}", f"mm2 + writeback, {adders[0]}, {first}",
                      f"writeback, {adders[0]} on the side SMs, {first}"]
        power_rows = sustained_rows(fns, names, power, batch=4)
    return {"count": count, "partitions": info, "ratio": ratio, "bar": CONCURRENT_BAR,
            "bar_met": met, "skipped": skipped, "rows": rows, "sustained": power_rows,
            "timings": Row(f"M{m} L{count}", timings)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"M = {QUICK_M}, p = 0.93 only")
    ap.add_argument("--m", type=int, default=None, help=f"tokens M (default {M})")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--adders", default=",".join(ADDERS),
                    help="the concurrent part's writeback adders (default: all)")
    ap.add_argument("--partitions", default=None,
                    help="the concurrent part's SmPartitions as mode:side_sms[:fine], "
                         "comma-separated (default: all of PARTITIONS)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--power", type=float, default=0.0,
                    help="concurrent part: seconds of each run back to back under nvidia-smi "
                         "(SM clock, board power; perf/gpu_power.py)")
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown --parts {sorted(unknown)}: pick from {', '.join(PARTS)}")
    adders = tuple(args.adders.split(","))
    if set(adders) - set(ADDERS):
        ap.error(f"--adders: pick from {', '.join(ADDERS)}")
    partitions = PARTITIONS if args.partitions is None else tuple(
        (f[0], int(f[1]), len(f) > 2 and f[2] == "fine")
        for f in (p.split(":") for p in args.partitions.split(",")))
    require_gpu()
    ops()
    from cute_kernels import force_path

    m = args.m or (QUICK_M if args.quick else M)
    rounds = args.rounds or (15 if args.quick else 10)
    sparsities = QUICK_SPARSITIES if args.quick else SPARSITIES
    print(f"{device_name()} | path {args.path or 'native'} | commit {commit_id()} | "
          f"torch {torch.__version__} | {datetime.date.today()}")
    payload = {"device": device_name(), "commit": commit_id(), "torch": torch.__version__,
               "date": str(datetime.date.today()), "path": args.path or "native", "m": m,
               "bars": {"dense at p 0.93 (x)": DENSE_BAR, "scatter_add vs torch (x)":
                        SCATTER_BAR, "partitioned / mm2 alone": CONCURRENT_BAR}}
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    with force_path(args.path):
        if "mlp" in parts:
            payload["mlp"] = mlp_part(m, sparsities, rounds, gen)
            torch.cuda.empty_cache()  # the part's tensors died with it
        if "scatter" in parts:
            payload["scatter"] = scatter_part(m, rounds, gen)
            torch.cuda.empty_cache()
        if "concurrent" in parts:
            payload["concurrent"] = concurrent_part(m, rounds, gen, adders, partitions,
                                                    args.power)
            torch.cuda.empty_cache()
        if "gated" in parts:
            payload["gated"] = gated_part(m, rounds, gen)
    print(f"\nbars: >= {DENSE_BAR:g}x dense at p {P_LAYOUT} (m-major); scatter_add >= "
          f"{SCATTER_BAR:g}x the faster torch form; mm2 + writeback on partitioned SMs <= "
          f"{CONCURRENT_BAR}x mm2 alone")
    print("wrote", save_results(args.out, "column_sparse_mlp", payload))
    if "mlp" in payload:
        plot_mlp(args.out, payload["mlp"])


if __name__ == "__main__":
    main()
