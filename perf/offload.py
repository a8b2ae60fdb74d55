"""How much of the PCIe time ``CacheOffloader`` (cute_kernels/offload.py, issue 16) hides
behind a layer's compute.

    python perf/offload.py [--quick] [--layers 8] [--mb 256] [--writeback] [--power SECONDS]
                           [--out perf/results]

L layers (default 8), each with a cache of S bytes (default 256 MB, bf16) kept in pinned host
memory by a ``CacheOffloader``, and a synthetic per-layer compute: a loop of bf16 4096^3
``torch.mm`` sized, by a calibration at the start, to take 1.25x the time of one layer's
host-to-device copy (a plain pinned ``copy_``), so there is enough compute to hide every copy.
One pass over the layers, three ways, interleaved in one timing loop:

* (a) prefetch: at layer i, ``get(i)`` then ``prefetch((i + 1) % L)``, then the compute. The
  last layer prefetches layer 0 for the next pass (the next diffusion step), so a pass starts
  with its first layer on the way, as in steady state;
* (b) no prefetch: ``get(i)`` copies on the spot (the current stream waits for it), then the
  compute. The side stream first waits for the current stream, so the copy starts when the
  layer before has finished, as an on-demand load does (without that wait the host, running
  ahead of the GPU, would start every copy early: an unintended prefetch);
* (c) compute only;
* (d) no offloader: the pass's copies back to back on a side stream into two preallocated
  buffers beside the compute, the floor any prefetching reaches on this machine (a copy and a
  GEMM running together slow each other).

Each pass ends with the current stream waiting for the offloader's side stream, so the timing
covers every copy it started. The compute does not read the cache: ``get`` already orders the
current stream after the copy, which is all a layer's kernels would need.

Reported: ms per pass, the hidden share 1 - (t_a - t_c) / (t_b - t_c) (bar >= 0.9), the
host-to-device GB/s the offloader reaches when the copies are exposed (L S / (t_b - t_c))
against a plain pinned ``copy_`` of the same bytes, the pinned host bytes held, and the peak
device memory of a prefetch pass in layers (the copies run ahead of the compute as far as the
host runs ahead of the GPU). ``--writeback``: every layer also ``put``s its cache back after
its compute (device to host, on the same side stream), and the compute is calibrated to 1.25x
a copy each way; the hidden share then covers both directions.

Method: cute_kernels/bench.py (interleaved contenders, warm-up, medians; one pass per
sample). Needs a CUDA GPU, 2 L S of pinned host memory (two offloaders: (a) and (b) must not
share prefetched layers) and about 3 S of device memory beyond the 96 MB of GEMM operands.
Writes offload.json into --out. docs/column_sparse_mlp.md describes the offloader's use.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys

import torch

from cute_kernels.bench import (
    Row,
    bench_interleaved,
    commit_id,
    device_name,
    format_table,
    save_results,
)

DEVICE = "cuda"
LAYERS, QUICK_LAYERS = 8, 4
LAYER_MB, QUICK_LAYER_MB = 256, 64
GEMM_N = 4096
COMPUTE_MARGIN = 1.25
HIDDEN_BAR = 0.9


def require_gpu() -> None:
    if not torch.cuda.is_available():
        sys.exit("perf/offload.py needs a CUDA GPU and torch.cuda.is_available() is False "
                 "here: run it on a GPU machine (docs/gpu.md)")


def median_ms(fn, reps: int = 10, warmup: int = 3) -> float:
    """Median over ``reps`` of one ``fn()`` between two CUDA events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def plain_copies(nbytes: int) -> dict:
    """ms of a plain pinned host-to-device and device-to-host ``copy_`` of ``nbytes``."""
    host = torch.empty(nbytes // 2, dtype=torch.bfloat16, pin_memory=True)
    dev = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=DEVICE)
    h2d = median_ms(lambda: dev.copy_(host, non_blocking=True))
    d2h = median_ms(lambda: host.copy_(dev, non_blocking=True))
    return {"h2d_ms": h2d, "d2h_ms": d2h, "h2d_gbs": nbytes / (h2d * 1e-3) / 1e9,
            "d2h_gbs": nbytes / (d2h * 1e-3) / 1e9}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_LAYERS} layers of {QUICK_LAYER_MB} MB")
    ap.add_argument("--layers", type=int, default=None, help=f"L (default {LAYERS})")
    ap.add_argument("--mb", type=int, default=None, help=f"S in MB (default {LAYER_MB})")
    ap.add_argument("--writeback", action="store_true",
                    help="also put each layer's cache back after its compute")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--margin", type=float, default=COMPUTE_MARGIN,
                    help=f"compute per layer / copy time (default {COMPUTE_MARGIN})")
    ap.add_argument("--power", type=float, default=0.0,
                    help="seconds of (c) and (d) each back to back under nvidia-smi: is the "
                         "compute's slow-down beside the copies a lower clock? "
                         "(perf/gpu_power.py)")
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args(argv)
    require_gpu()
    from cute_kernels.offload import CacheOffloader

    layers = args.layers or (QUICK_LAYERS if args.quick else LAYERS)
    nbytes = (args.mb or (QUICK_LAYER_MB if args.quick else LAYER_MB)) * 2**20
    if layers < 2:
        ap.error("--layers must be at least 2 (prefetching needs a next layer)")
    print(f"{device_name()} | commit {commit_id()} | torch {torch.__version__} | "
          f"{datetime.date.today()}")

    # the caches, in pinned host memory: one offloader per mode that reads them back
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ahead = CacheOffloader(ahead=2)
    on_the_spot = CacheOffloader(ahead=2)
    for i in range(layers):
        t = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=DEVICE).normal_(
            generator=gen)
        ahead.put(i, t)
        on_the_spot.put(i, t)
        del t
    torch.cuda.synchronize()
    torch.cuda.empty_cache()

    # calibration: one layer's copies and one GEMM
    plain = plain_copies(nbytes)
    a = torch.randn(GEMM_N, GEMM_N, device=DEVICE, generator=gen).bfloat16()
    b = torch.randn(GEMM_N, GEMM_N, device=DEVICE, generator=gen).bfloat16()
    c = torch.empty_like(a)
    mm_ms = median_ms(lambda: torch.mm(a, b, out=c), reps=20)
    to_hide = plain["h2d_ms"] + (plain["d2h_ms"] if args.writeback else 0.0)
    n_mm = max(1, math.ceil(args.margin * to_hide / mm_ms))

    def compute() -> None:
        for _ in range(n_mm):
            torch.mm(a, b, out=c)

    compute_ms = median_ms(compute, reps=5, warmup=1)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()  # the GEMM operands; no cache on the device

    def layer_loop(off, prefetch: bool):
        def run(_):
            for i in range(layers):
                if not prefetch:  # on demand: the copy starts after the previous layer
                    off.stream.wait_stream(torch.cuda.current_stream())
                cache = off.get(i)
                if prefetch:
                    off.prefetch((i + 1) % layers)
                compute()
                if args.writeback:
                    off.put(i, cache)
                del cache
            torch.cuda.current_stream().wait_stream(off.stream)
        return run

    def compute_only(_):
        for _ in range(layers):
            compute()

    # (d): the same copies with no offloader at all, back to back on a side stream into two
    # preallocated buffers while the compute runs: the floor any prefetching can reach here
    side = torch.cuda.Stream()
    landing = [torch.empty(nbytes // 2, dtype=torch.bfloat16, device=DEVICE) for _ in range(2)]
    sources = [ahead._host[i].view(-1) for i in range(layers)]

    def overlap_floor(_):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(layers):
                landing[i % 2].copy_(sources[i], non_blocking=True)
        compute_only(None)
        torch.cuda.current_stream().wait_stream(side)

    fns = {"(a) prefetch one layer ahead": layer_loop(ahead, True),
           "(b) no prefetch (get on the spot)": layer_loop(on_the_spot, False),
           "(c) compute only": compute_only,
           "(d) compute beside plain copies": overlap_floor}
    timings = bench_interleaved(fns, [None], rounds=args.rounds, warmup=2, inner=1)
    t_a, t_b, t_c, t_d = (timings[n].median_ms for n in fns)
    # nan where the copies did not show at all (t_b <= t_c: nothing to hide was measured)
    hidden = 1.0 - (t_a - t_c) / (t_b - t_c) if t_b > t_c else float("nan")

    # the peak device memory of one prefetch pass, in layers (layer 0 comes prefetched by the
    # pass before it and counts)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fns["(a) prefetch one layer ahead"](None)
    torch.cuda.synchronize()
    peak_layers = (torch.cuda.max_memory_allocated() - base) / nbytes

    moved = layers * nbytes * (2 if args.writeback else 1)
    exposed_gbs = moved / ((t_b - t_c) * 1e-3) / 1e9 if t_b > t_c else float("nan")
    plain_gbs = (plain["h2d_gbs"] if not args.writeback else
                 2 * nbytes / ((plain["h2d_ms"] + plain["d2h_ms"]) * 1e-3) / 1e9)
    met = hidden >= HIDDEN_BAR
    print(f"\n{layers} layers x {nbytes / 2**20:.0f} MB bf16 caches, pinned host memory held "
          f"{(ahead.host_bytes() + on_the_spot.host_bytes()) / 2**30:.2f} GiB "
          f"(two offloaders){', with write-back' if args.writeback else ''}")
    print(f"one layer: plain pinned copy_ H2D {plain['h2d_ms']:.3f} ms "
          f"({plain['h2d_gbs']:.1f} GB/s), D2H {plain['d2h_ms']:.3f} ms "
          f"({plain['d2h_gbs']:.1f} GB/s); compute {n_mm} x mm {GEMM_N}^3 = "
          f"{compute_ms:.3f} ms ({compute_ms / to_hide:.2f}x the copy time to hide)\n")
    print(format_table(["mode", "ms per pass", "ms per layer", "- compute only"],
                       [[n, t, t / layers, t - t_c]
                        for n, t in zip(fns, (t_a, t_b, t_c, t_d))]))
    floor = 1.0 - (t_d - t_c) / (t_b - t_c) if t_b > t_c else float("nan")
    print(f"\nhidden share 1 - (t_a - t_c) / (t_b - t_c) = {hidden:.3f} (bar >= {HIDDEN_BAR}: "
          f"{'met' if met else 'NOT met'}); the same with (d), plain copies beside the "
          f"compute: {floor:.3f}")
    print(f"exposed copies (b): {exposed_gbs:.1f} GB/s against {plain_gbs:.1f} GB/s for plain "
          f"pinned copy_ ({exposed_gbs / plain_gbs:.2f}x)")
    print(f"peak device memory of a prefetch pass: {peak_layers:.1f} layers")
    power_rows = []
    if args.power:  # a call here is one pass
        from gpu_power import sustained_rows
        power_rows = sustained_rows(fns, ("(c) compute only", "(d) compute beside plain copies"),
                                    args.power, batch=1)
    payload = {"device": device_name(), "commit": commit_id(), "torch": torch.__version__,
               "date": str(datetime.date.today()), "layers": layers, "layer_bytes": nbytes,
               "writeback": args.writeback, "plain_copy": plain, "mm_ms": mm_ms,
               "mm_per_layer": n_mm, "compute_ms": compute_ms,
               "ms": {"prefetch": t_a, "no_prefetch": t_b, "compute_only": t_c,
                      "plain_copies_beside": t_d},
               "hidden_share": hidden, "hidden_share_plain_copies": floor,
               "bar": HIDDEN_BAR, "bar_met": met,
               "exposed_gbs": exposed_gbs, "plain_gbs": plain_gbs,
               "host_bytes": ahead.host_bytes() + on_the_spot.host_bytes(),
               "peak_prefetch_layers": peak_layers, "sustained": power_rows,
               "timings": Row(f"{layers}x{nbytes}", timings)}
    print("wrote", save_results(args.out, "offload", payload))


if __name__ == "__main__":
    main()
