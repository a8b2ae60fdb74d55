"""Decode attention: our split-KV (flash-decoding) kernels against every SDPA backend (issue 17).

    python perf/decode.py [--quick] [--causal] [--graphs] [--rounds N] [--out perf/results]
                          [--s-q 1,8] [--s-kv 4096,...] [--batch 1,4,16] [--splits 1,2,...]
                          [--path hopper|ampere] [--plan [--sms N]]

Goal (issue 17): at S_q = 1 and 8, S_kv = 4k..128k, H = 32, H_kv = 8, D = 128, B = 1..16,
``ck.attention`` at >= 1.0x the fastest SDPA backend that accepts the shape.

Shapes: S_q in {1, 8} x S_kv in {4096, 16384, 65536, 131072} x B in {1, 4, 16} (``--quick``:
S_kv in {4096, 65536}, B in {1, 16}); H 32, H_kv 8 (GQA), D 128, bf16, layout (B, H, S, D).
Non-causal by default (a decode step reads every cached key); ``--causal``: our bottom-right
causal mask, SDPA given the same mask (a boolean attn_mask; flash through its own causal flag,
which is bottom-right, as torch's CausalBias calls it; at S_q = 1 causal is non-causal).

Contenders per shape, all interleaved in one timing loop:

* SDPA with one backend each: cuDNN, flash, efficient (math is far too slow), GQA through
  ``enable_gqa=True``; a backend that rejects the shape is left out of that shape (the reason
  is printed once and saved), and "fastest SDPA" is the fastest of those that ran;
* ours, ``ck.attention(q, k, v, num_splits=n)`` for n in {1, 2, 4, 8, 16, 32} with
  n <= ceil(S_kv / 128) (the op caps n there); n = 1 is the plain kernel, n > 1 the split-KV
  kernel plus the float32 combine (on Hopper, 2-8 splits of a tile in one cluster that
  combines them, where the clusters fit); also the op's own ``num_splits=None`` n
  (``ops.attention.default_splits``), when it is not one of those; ``--joint N,..``: those n
  through the combine kernel as well (A/B against the cluster route).

Every contender's output on the first input set is checked against a float32 reference (max
|o - ref| / max |ref| <= 2e-2: the split kernels had not run on a GPU before); one that fails
is timed but marked ``*`` and kept out of "fastest" and "best".

Reports the header (device | torch | commit | date), a table of the SDPA backends (ms, GB/s
of the fastest: q, k, v and o bytes / time) and a table of ours: ms per n, the best n and
its speed ratio against the fastest SDPA (SDPA ms / ours ms; >= 1.0 meets the bar), and the
heuristic's n, ms and ratios (against SDPA and against the best n). Writes decode.json and
decode.png (the ratios per shape) into --out (``decode_causal`` / ``_graphs`` with those
flags).

Method: cute_kernels/bench.py (interleaved contenders, warm-up, medians, input sets rotated
over 2x the L2, at most ~30 GB of them; the largest shapes hold 2 sets of 8.6 GB). Eager
calls by default, so the host cost of each call counts (our split route launches the kernel
and about ten torch ops for the combine; SDPA enters ``sdpa_kernel`` per call): at B 1 and
S_kv 4k a call is a few microseconds of GPU work. ``--graphs`` replays each contender from a
CUDA graph per input set instead (GPU time only). ``--plan`` prints the shapes, the n swept
and the heuristic's choices (SMs from the GPU, else ``--sms``, default 132) and exits, with
or without a GPU. Otherwise needs a CUDA GPU (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import warnings

import torch

from cute_kernels.ops.attention_splits import (  # noqa: F401 (tests reach them here)
    BLOCK_N,
    auto_splits,
    query_tiles,
    splits_heuristic,
)

DEVICE = "cuda"
H, H_KV, D = 32, 8, 128
DTYPE = torch.bfloat16
S_Q = (1, 8)
S_KV, QUICK_S_KV = (4096, 16384, 65536, 131072), (4096, 65536)
BATCH, QUICK_BATCH = (1, 4, 16), (1, 16)
SPLITS = (1, 2, 4, 8, 16, 32)
H100_SMS = 132
MAX_SET_BYTES = 30 * 10**9  # the input-set rotation's memory cap
TOLERANCE = 2e-2  # max |o - ref| / max |ref|
BAR = 1.0  # ours / fastest SDPA (speed)
SDPA_BACKENDS = ("cuDNN", "flash", "efficient")


def op_splits(b: int, s_q: int, s_kv: int, causal: bool, sms: int, on_gpu: bool) -> int:
    """The op's ``num_splits=None`` at this shape on ``sms`` SMs (``ops.attention.
    default_splits``: ``auto_splits``, or 8 splits combined in clusters where those fit and
    the keys are few). Off the GPU (``--plan``): the Hopper path, its clusters taken to fit."""
    from cute_kernels.ops.attention import default_splits

    if not on_gpu:
        return default_splits(b, H, s_q, D, H_KV, s_kv, causal, sms, True)
    from cute_kernels.runtime.arch import HOPPER, cluster_capacity, device_target, hbm_gbps

    device = torch.device(DEVICE, torch.cuda.current_device())
    return default_splits(b, H, s_q, D, H_KV, s_kv, causal, sms,
                          lambda: device_target(device)[0] == HOPPER,
                          lambda n: cluster_capacity(device, n), hbm_gbps(device))


def split_candidates(s_kv: int, splits=SPLITS) -> list[int]:
    """The n swept at ``s_kv``: those the op would not cap (n <= ceil(s_kv / 128))."""
    return [n for n in splits if n <= -(-s_kv // BLOCK_N)]


def shapes(quick: bool, s_q=None, s_kv=None, batch=None) -> list[tuple[int, int, int]]:
    """(B, S_q, S_kv) in table order: S_q, then S_kv, then B."""
    s_kvs = s_kv or (QUICK_S_KV if quick else S_KV)
    batches = batch or (QUICK_BATCH if quick else BATCH)
    return [(b, sq, skv) for sq in (s_q or S_Q) for skv in s_kvs for b in batches]


def label(b: int, s_q: int, s_kv: int) -> str:
    kv = f"{s_kv // 1024}k" if s_kv % 1024 == 0 else str(s_kv)
    return f"B{b} Sq{s_q} Skv{kv}"


def set_bytes(b: int, s_q: int, s_kv: int) -> int:
    """One input set: q, k and v."""
    return 2 * (b * H * s_q * D + 2 * b * H_KV * s_kv * D)


def traffic_bytes(b: int, s_q: int, s_kv: int) -> int:
    """The bytes a call must move at least: q, k and v read, o written (bf16)."""
    return set_bytes(b, s_q, s_kv) + 2 * b * H * s_q * D


def n_sets(bytes_per_set: int, needed: int) -> int:
    """``needed`` (input_sets_needed: > 2x the L2), at most MAX_SET_BYTES of them, never < 2."""
    return max(2, min(needed, MAX_SET_BYTES // max(1, bytes_per_set)))


def ours_name(n: int) -> str:
    return f"cute n={n}"


def summarize(ms: dict[str, float], splits: list[int], heuristic: int,
              wrong=frozenset()) -> dict:
    """The shape's summary from each contender's median ms (those that ran): the fastest SDPA
    backend, our best n, the heuristic's n, and the speed ratios (SDPA ms / ours ms, so
    >= 1.0 meets the bar; heuristic_vs_best = best ms / heuristic ms). Contenders in
    ``wrong`` (failed the accuracy check) are not candidates; missing values are nan."""
    nan = float("nan")
    sdpa = {n: t for n, t in ms.items() if n.startswith("SDPA-") and n not in wrong}
    ours = {n: ms[ours_name(n)] for n in sorted({*splits, heuristic})
            if ours_name(n) in ms and ours_name(n) not in wrong}
    sdpa_name = min(sdpa, key=sdpa.get) if sdpa else None
    sdpa_ms = sdpa[sdpa_name] if sdpa else nan
    best_n = min(ours, key=ours.get) if ours else None
    best_ms = ours[best_n] if ours else nan
    heur_ms = ours.get(heuristic, nan)
    return {"sdpa": sdpa_name, "sdpa_ms": sdpa_ms, "best_n": best_n, "best_ms": best_ms,
            "best_vs_sdpa": sdpa_ms / best_ms, "heuristic_n": heuristic,
            "heuristic_ms": heur_ms, "heuristic_vs_sdpa": sdpa_ms / heur_ms,
            "heuristic_vs_best": best_ms / heur_ms}


def reference(q, k, v, causal: bool) -> torch.Tensor:
    """float32 attention under our conventions (GQA: query head h reads kv head h // (H /
    H_kv); causal: bottom-right), one batch entry at a time, the query heads of a kv head
    stacked as rows (no repeated K/V)."""
    b, h, s_q, d = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    rep = h // h_kv
    out = torch.empty(b, h, s_q, d, dtype=torch.float32, device=q.device)
    row = torch.arange(rep * s_q, device=q.device)[:, None] % s_q
    hidden = torch.arange(s_kv, device=q.device)[None, :] > row + (s_kv - s_q)
    for i in range(b):
        logits = q[i].float().reshape(h_kv, rep * s_q, d) @ k[i].float().transpose(-1, -2)
        logits *= 1.0 / math.sqrt(d)
        if causal:
            logits.masked_fill_(hidden, float("-inf"))
        out[i] = (torch.softmax(logits, dim=-1) @ v[i].float()).reshape(h, s_q, d)
    return out


def relative_error(o: torch.Tensor, ref: torch.Tensor) -> float:
    return ((o.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def sdpa_contenders(causal: bool, s_q: int, s_kv: int) -> dict:
    """SDPA with one backend each. Causal with S_q > 1: the bottom-right mask as a boolean
    attn_mask, flash by its own causal flag (bottom-right, unlike SDPA's is_causal)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"cuDNN": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    mask = None
    if causal and s_q > 1:
        i = torch.arange(s_q, device=DEVICE)[:, None]
        mask = torch.arange(s_kv, device=DEVICE)[None, :] <= i + (s_kv - s_q)

    def on(backend):
        def run(x):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(x[0], x[1], x[2], attn_mask=mask,
                                                      enable_gqa=True)
        return run

    def flash_bottom_right(x):
        return torch.ops.aten._scaled_dot_product_flash_attention(
            x[0], x[1], x[2], 0.0, is_causal=True, return_debug_mask=False)[0]

    out = {f"SDPA-{name}": on(backends[name]) for name in SDPA_BACKENDS}
    if mask is not None:
        out["SDPA-flash"] = flash_bottom_right
    return out


def our_contenders(causal: bool, ns) -> dict:
    import cute_kernels as ck

    def at(n):
        return lambda x: ck.attention(x[0], x[1], x[2], causal=causal, num_splits=n)

    return {ours_name(n): at(n) for n in ns}


def joint_name(n: int) -> str:
    return f"cute n={n} joint"


def joint_contenders(causal: bool, ns) -> dict:
    """Ours at n splits through the combine kernel even where the op would combine them in
    a cluster (``tuning.attention.CLUSTER_COMBINE`` off for the call; the plan cache keys on
    it), for A/B runs against the cluster route."""
    import cute_kernels as ck
    from cute_kernels.tuning import attention as tuning

    def at(n):
        def run(x):
            tuning.CLUSTER_COMBINE = False
            try:
                return ck.attention(x[0], x[1], x[2], causal=causal, num_splits=n)
            finally:
                tuning.CLUSTER_COMBINE = True
        return run

    return {joint_name(n): at(n) for n in ns}


def short(text: str, limit: int = 160) -> str:
    first = (text.strip().splitlines() or [""])[0]
    return first if len(first) <= limit else first[:limit - 3] + "..."


def probe(fns: dict, x, ref) -> tuple[dict, dict]:
    """Run each contender once on ``x`` (compiles ours): (skipped name -> reason, removed from
    ``fns``; name -> relative error against ``ref``)."""
    skipped, errors = {}, {}
    for name in list(fns):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                o = fns[name](x)
                torch.cuda.synchronize()
            except Exception as err:  # noqa: BLE001  (a backend's or our build's refusal)
                notes = [short(str(w.message)) for w in caught][:3]
                skipped[name] = "; ".join([f"{type(err).__name__}: {short(str(err))}", *notes])
                del fns[name]
                continue
        errors[name] = relative_error(o, ref)
    return skipped, errors


def graphed(fns: dict, sets) -> dict:
    """Each contender as replays of one CUDA graph per input set (one shared memory pool);
    one whose capture fails is left out, with a message."""
    pool, out = torch.cuda.graph_pool_handle(), {}
    for name, fn in fns.items():
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn(sets[0])
            torch.cuda.current_stream().wait_stream(side)
            graphs = {}
            for x in sets:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    fn(x)
                graphs[id(x)] = g
        except (RuntimeError, ValueError, TypeError) as err:
            print(f"  skip {name} (no CUDA graph): {short(str(err))}")
            continue
        out[name] = replay(graphs)
    return out


def replay(graphs: dict):
    return lambda x: graphs[id(x)].replay()


def measure(b: int, s_q: int, s_kv: int, args, sms: int) -> dict:
    """One shape: set-up, probe, timing, summary."""
    from cute_kernels.bench import Row, bench_interleaved, input_sets_needed

    per_set = set_bytes(b, s_q, s_kv)
    count = n_sets(per_set, input_sets_needed(per_set))
    gen = torch.Generator(device=DEVICE).manual_seed(b * 1000003 + s_q * 1009 + s_kv)
    sets = [(torch.randn(b, H, s_q, D, device=DEVICE, generator=gen, dtype=DTYPE),
             torch.randn(b, H_KV, s_kv, D, device=DEVICE, generator=gen, dtype=DTYPE),
             torch.randn(b, H_KV, s_kv, D, device=DEVICE, generator=gen, dtype=DTYPE))
            for _ in range(count)]
    ref = reference(*sets[0], args.causal)
    splits = split_candidates(s_kv, args.splits)
    heur = op_splits(b, s_q, s_kv, args.causal, sms, on_gpu=True)
    fns = {**sdpa_contenders(args.causal, s_q, s_kv),
           **our_contenders(args.causal, sorted({*splits, heur})),
           **joint_contenders(args.causal, split_candidates(s_kv, args.joint))}
    skipped, errors = probe(fns, sets[0], ref)
    del ref
    for name, reason in skipped.items():
        print(f"  skip {name}: {reason}")
    wrong = {n for n, e in errors.items() if not e <= TOLERANCE}
    for name in sorted(wrong):
        print(f"  WRONG {name}: max |o - ref| / max |ref| = {errors[name]:.3g} "
              f"(> {TOLERANCE}); timed, kept out of fastest/best")
    if args.graphs:
        fns = graphed(fns, sets)
    timings = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)
    ms = {n: t.median_ms for n, t in timings.items()}
    del sets
    torch.cuda.empty_cache()
    summary = summarize(ms, splits, heur, wrong)
    return {"label": label(b, s_q, s_kv), "b": b, "s_q": s_q, "s_kv": s_kv, "sets": count,
            "splits": splits, "ms": ms, "errors": errors, "wrong": sorted(wrong),
            "skipped": skipped, "bytes": traffic_bytes(b, s_q, s_kv), **summary,
            "row": Row(label(b, s_q, s_kv), timings, {"bytes": traffic_bytes(b, s_q, s_kv)})}


def cell(r: dict, name: str):
    """A contender's ms for a table: '-' where it did not run, '*' where it was wrong."""
    if name not in r["ms"]:
        return "-"
    return f"{r['ms'][name]:.3f}*" if name in r["wrong"] else r["ms"][name]


def gbps(r: dict, ms: float) -> float:
    return r["bytes"] / (ms * 1e-3) / 1e9


def tables(results: list[dict], splits) -> tuple[list, list, list, list]:
    sdpa_headers = ["shape", "sets", *(f"{n} ms" for n in SDPA_BACKENDS), "fastest",
                    "GB/s"]
    sdpa_rows = [[r["label"], r["sets"], *(cell(r, f"SDPA-{n}") for n in SDPA_BACKENDS),
                  (r["sdpa"] or "-").removeprefix("SDPA-"), gbps(r, r["sdpa_ms"])]
                 for r in results]
    ours_headers = ["shape", "SDPA ms", *(f"n={n}" for n in splits), "best n", "best ms",
                    "best x SDPA", "heur n", "heur ms", "heur x SDPA", "heur vs best",
                    "best GB/s"]
    ours_rows = [[r["label"], r["sdpa_ms"], *(cell(r, ours_name(n)) for n in splits),
                  r["best_n"] or "-", r["best_ms"], r["best_vs_sdpa"], r["heuristic_n"],
                  r["heuristic_ms"], r["heuristic_vs_sdpa"], r["heuristic_vs_best"],
                  gbps(r, r["best_ms"])] for r in results]
    return sdpa_headers, sdpa_rows, ours_headers, ours_rows


def verdict(results: list[dict]) -> list[str]:
    """The summary lines: the bar, the heuristic, the skipped backends."""
    lines = []

    def worst(key):
        rs = [r for r in results if r[key] == r[key]]
        if not rs:
            return "n/a"
        w = min(rs, key=lambda r: r[key])
        return (f"worst {w[key]:.2f}x ({w['label']}), median "
                f"{statistics.median(r[key] for r in rs):.2f}x")

    met = sum(r["best_vs_sdpa"] >= BAR for r in results)
    lines.append(f"best n vs fastest SDPA: {met}/{len(results)} shapes >= {BAR}x; "
                 f"{worst('best_vs_sdpa')}")
    lines.append(f"heuristic vs fastest SDPA: {worst('heuristic_vs_sdpa')}")
    lines.append(f"heuristic vs best n (best ms / heuristic ms): {worst('heuristic_vs_best')}")
    off = [f"{r['label']}: heuristic n={r['heuristic_n']}, best n={r['best_n']}"
           for r in results if r["best_n"] is not None and r["heuristic_n"] != r["best_n"]]
    lines.append("heuristic != best n at " + ("; ".join(off) if off else "no shape"))
    reasons: dict[str, tuple[list, str]] = {}
    for r in results:
        for name, why in r["skipped"].items():
            reasons.setdefault(name, ([], why))[0].append(r["label"])
    for name, (where, why) in reasons.items():
        lines.append(f"skipped {name} at {len(where)} shape(s) ({', '.join(where[:3])}"
                     f"{', ...' if len(where) > 3 else ''}): {why}")
    return lines


def ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def plan(args, sms: int) -> None:
    print(f"H{H} H_kv{H_KV} D{D} {'causal' if args.causal else 'non-causal'}, SMs {sms}, "
          f"n swept from {args.splits}")
    rows = []
    for b, s_q, s_kv in shapes(args.quick, args.s_q, args.s_kv, args.batch):
        tiles = query_tiles(b, H_KV, s_q, H // H_KV, args.causal)
        heur = op_splits(b, s_q, s_kv, args.causal, sms, on_gpu=False)
        rows.append([label(b, s_q, s_kv), tiles, " ".join(map(str, split_candidates(
            s_kv, args.splits))), heur, tiles * heur, set_bytes(b, s_q, s_kv) / 1e9])
    from cute_kernels.bench import format_table

    print(format_table(["shape", "CTAs per split", "n swept", "heuristic n", "CTAs",
                        "GB per set"], rows))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"S_kv in {QUICK_S_KV}, B in {QUICK_BATCH}")
    ap.add_argument("--causal", action="store_true", help="bottom-right causal (default: not)")
    ap.add_argument("--graphs", action="store_true",
                    help="time CUDA-graph replays (GPU time, no host cost)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--s-q", type=ints, default=None, help=f"S_q values (default {S_Q})")
    ap.add_argument("--s-kv", type=ints, default=None, help=f"S_kv values (default {S_KV})")
    ap.add_argument("--batch", type=ints, default=None, help=f"B values (default {BATCH})")
    ap.add_argument("--splits", type=ints, default=SPLITS, help=f"n swept (default {SPLITS})")
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--plan", action="store_true",
                    help="print shapes, n swept and the heuristic's n, then exit (no GPU needed)")
    ap.add_argument("--sms", type=int, default=None,
                    help=f"SM count for the heuristic (default: the GPU's, {H100_SMS} without)")
    ap.add_argument("--combine", choices=["torch", "kernel"], default=None,
                    help="how split-KV partials are combined (default: the library's "
                         "ops.attention.SPLIT_COMBINE_KERNEL_ON)")
    ap.add_argument("--no-pdl", action="store_true",
                    help="launch the combine kernel plainly, not as a programmatic dependent "
                         "(ops.attention.SPLIT_COMBINE_PDL)")
    ap.add_argument("--joint", type=ints, default=(),
                    help="also time these n through the combine kernel where the op would "
                         "combine in a cluster (A/B; CLUSTER_COMBINE off for them)")
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args(argv)
    from cute_kernels.ops import attention as attention_ops

    attention_ops.SPLIT_COMBINE_PDL = not args.no_pdl
    if args.combine is not None:
        attention_ops.SPLIT_COMBINE_KERNEL_ON = args.combine == "kernel"
    gpu = torch.cuda.is_available()
    sms = args.sms or (torch.cuda.get_device_properties(0).multi_processor_count if gpu
                       else H100_SMS)
    if args.plan:
        plan(args, sms)
        return
    if not gpu:
        sys.exit("perf/decode.py needs a CUDA GPU and torch.cuda.is_available() is False "
                 "here: run it on a GPU machine (docs/gpu.md), or pass --plan")
    from cute_kernels import force_path
    from cute_kernels.bench import (
        commit_id,
        device_name,
        format_table,
        l2_bytes,
        plot_lines,
        save_results,
    )

    mode = "causal" if args.causal else "non-causal"
    timing = "CUDA graphs" if args.graphs else "eager"
    print(f"{device_name()} | torch {torch.__version__} | commit {commit_id()} | "
          f"{datetime.date.today()}")
    print(f"decode: H{H} H_kv{H_KV} D{D} bf16 {mode}, {timing}, SMs {sms}, "
          f"L2 {l2_bytes() / 2**20:.0f} MiB, rounds {args.rounds}, path "
          f"{args.path or 'native'}\n")
    results = []
    with force_path(args.path):
        for b, s_q, s_kv in shapes(args.quick, args.s_q, args.s_kv, args.batch):
            print(label(b, s_q, s_kv))
            results.append(measure(b, s_q, s_kv, args, sms))
            r = results[-1]
            print(f"  fastest SDPA {r['sdpa']} {r['sdpa_ms']:.4f} ms | best n={r['best_n']} "
                  f"{r['best_ms']:.4f} ms ({r['best_vs_sdpa']:.2f}x) | heuristic "
                  f"n={r['heuristic_n']} {r['heuristic_ms']:.4f} ms "
                  f"({r['heuristic_vs_sdpa']:.2f}x)")
    splits = sorted({n for r in results for n in r["splits"]}
                    | {r["heuristic_n"] for r in results})
    sdpa_headers, sdpa_rows, ours_headers, ours_rows = tables(results, splits)
    print(f"\n{device_name()} | torch {torch.__version__} | commit {commit_id()} | "
          f"{datetime.date.today()}\ndecode, {mode}, {timing}: SDPA backends (ms; GB/s of "
          f"the fastest: q, k, v, o bytes / time)\n")
    print(format_table(sdpa_headers, sdpa_rows))
    print(f"\nours: ck.attention(num_splits=n), ms; x SDPA = fastest SDPA ms / ours ms "
          f"(bar >= {BAR}); heur = the op's num_splits=None (default_splits); "
          f"* = failed the accuracy check\n")
    print(format_table(ours_headers, ours_rows))
    if args.joint:
        print("\nthe same n through the combine kernel (ms; x = that n's default route / this):")
        for r in results:
            print(f"  {r['label']}: " + ", ".join(
                f"n={n} {cell(r, joint_name(n))}"
                + (f" ({r['ms'][joint_name(n)] / r['ms'][ours_name(n)]:.3f}x)"
                   if joint_name(n) in r['ms'] and ours_name(n) in r['ms'] else "")
                for n in args.joint))
    print()
    for line in verdict(results):
        print(line)
    stem = "decode" + ("_causal" if args.causal else "") + ("_graphs" if args.graphs else "")
    payload = {"device": device_name(), "commit": commit_id(), "torch": torch.__version__,
               "date": str(datetime.date.today()), "sms": sms, "l2_bytes": l2_bytes(),
               "config": {"H": H, "H_kv": H_KV, "D": D, "dtype": "bfloat16",
                          "causal": args.causal, "graphs": args.graphs,
                          "rounds": args.rounds, "path": args.path or "native",
                          "splits": list(args.splits), "tolerance": TOLERANCE, "bar": BAR},
               "sdpa": {"headers": sdpa_headers, "rows": sdpa_rows},
               "ours": {"headers": ours_headers, "rows": ours_rows},
               "verdict": verdict(results),
               "shapes": [{k: v for k, v in r.items() if k != "row"} for r in results],
               "timings": [r["row"] for r in results]}
    print("wrote", save_results(args.out, stem, payload))
    png = plot_lines(f"{args.out}/{stem}.png",
                     f"decode H{H} H_kv{H_KV} D{D} {mode}, {timing}: ours vs fastest SDPA "
                     f"({device_name()})", [r["label"] for r in results],
                     {"best n": [r["best_vs_sdpa"] for r in results],
                      "heuristic n": [r["heuristic_vs_sdpa"] for r in results],
                      "n = 1 (no split)": [r["sdpa_ms"] / r["ms"][ours_name(1)]
                                           if ours_name(1) in r["ms"] else float("nan")
                                           for r in results]},
                     "speed vs fastest SDPA (x)", hline=(f"bar {BAR}x", BAR))
    if png:
        print("wrote", png)


if __name__ == "__main__":
    main()
