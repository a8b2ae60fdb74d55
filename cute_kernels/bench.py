"""The timing harness shared by ``perf/`` scripts and ``cute-kernels demo``.

Method (also stated at the top of perf/RESULTS.md, for every table there): every contender
runs in the same process, interleaved round by round (the order rotates each round so none
always runs first), after a warm-up of at least ``WARMUP_S`` seconds. Each timed sample is a
CUDA-event interval over ``inner`` back-to-back calls that walk through several input sets
whose combined size exceeds twice the L2, so no call reads inputs its predecessor left in
cache. The reported time is the median sample divided by ``inner``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch


@dataclass
class Timing:
    name: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int


@dataclass
class Row:
    """One problem size: each contender's timing, plus what to report alongside."""

    label: str
    timings: dict[str, Timing]
    work: dict[str, float] = field(default_factory=dict)  # e.g. {"bytes": ..., "flops": ...}


#: the least wall time a warm-up takes: the GPU waits at its idle clock (345 MHz on the H100
#: before a call), and a warm-up of a few calls (about 8 ms at 1024 x 14336 x 4096) timed the
#: first contender of a run in another clock state than the rest (the op's default 165.8 us
#: against the same plan forced, 158.2, in one H100 run)
WARMUP_S = 0.25


def l2_bytes(device=None) -> int:
    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 50 * 2**20))


def host_us(fn: Callable[[], object], calls: int = 20, warmup: int = 0) -> float:
    """Host microseconds per call of ``fn`` (no sync inside the timed calls: what the Python
    side and the launches cost the CPU; the GPU idles when this exceeds its work)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def graph_ms(fn: Callable[[object], object], sets: Sequence[object] = (None,), *,
             inner: int = 20, reps: int = 15) -> float:
    """GPU milliseconds per call: ``inner`` calls of ``fn`` over the rotating ``sets``
    captured in one CUDA graph (on a side stream, after one warm call that settles the
    caching allocator), replayed ``reps`` times, the median: no host cost in the number."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(sets[0])
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(inner):
                fn(sets[i % len(sets)])
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def input_sets_needed(bytes_per_set: int, device=None) -> int:
    """How many distinct input sets make a rotation bigger than twice the L2."""
    return max(2, math.ceil(2 * l2_bytes(device) / max(1, bytes_per_set)) + 1)


def bench_interleaved(
    contenders: dict[str, Callable[[object], object]],
    input_sets: Sequence[object],
    *,
    warmup: int = 3,
    rounds: int = 25,
    inner: int | None = None,
    warmup_s: float = WARMUP_S,
) -> dict[str, Timing]:
    """Time each ``fn(inputs)`` over rotating ``input_sets``; see the module docstring.
    The warm-up runs ``warmup`` rounds and then more until ``warmup_s`` seconds have passed."""
    names = list(contenders)
    n_sets = len(input_sets)
    inner = inner or max(n_sets, 4)

    def run(name: str, start: int) -> None:
        fn = contenders[name]
        for i in range(inner):
            fn(input_sets[(start + i) % n_sets])

    began = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - began < warmup_s:
        for name in names:
            run(name, 0)
        torch.cuda.synchronize()
        done += 1
    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run(name, r)
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    out = {}
    for name in names:
        per_call = sorted(s.elapsed_time(e) / inner for s, e in events[name])
        out[name] = Timing(name, statistics.median(per_call),
                           per_call[len(per_call) // 10], per_call[(9 * len(per_call)) // 10],
                           len(per_call))
    return out


def commit_id() -> str:
    """The commit measured: $CK_COMMIT, else git's HEAD with "+changes" when tracked files
    differ from it (a device copy of a newer working tree may carry an older HEAD)."""
    import os
    import subprocess

    if os.environ.get("CK_COMMIT"):
        return os.environ["CK_COMMIT"]
    try:
        head = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL).strip()
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"],
                               stderr=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head if clean else f"{head}+changes"


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(c: object) -> str:
    if isinstance(c, float):
        return f"{c:.3f}" if abs(c) < 100 else f"{c:.1f}"
    return str(c)


def save_results(out_dir: str | Path, stem: str, payload: dict) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem}.json"
    path.write_text(json.dumps(payload, indent=2, default=_json_default))
    return path


def _json_default(o):
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    raise TypeError(type(o))


def plot_lines(path: str | Path, title: str, xlabels: Sequence[str],
               series: dict[str, Sequence[float]], ylabel: str,
               hline: tuple[str, float] | None = None) -> Path | None:
    """A line plot of ``series`` over ``xlabels``; None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = range(len(xlabels))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    if hline:
        ax.axhline(hline[1], color="gray", linestyle="--", label=hline[0])
    ax.set_xticks(list(xs), list(xlabels), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
