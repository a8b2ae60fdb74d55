"""SM clock and board power while one kernel runs back to back (is a kernel power-limited?).

A kernel that draws more energy per flop than another can run at the same cycle count and
still be slower: past the board's power limit the GPU lowers its SM clock. ``sustained``
runs ``fn`` over rotating input sets for ``seconds`` while a thread polls ``nvidia-smi``,
and returns the µs per call and the median SM clock and power of the second half (the
clock settles within a few hundred ms). Clocks are read, never set.

    from gpu_power import sustained
    sustained(lambda s: torch.matmul(s[0], s[1].t(), out=s[2]), sets, seconds=3)
"""

from __future__ import annotations

import statistics
import subprocess
import threading
import time

import torch

QUERY = "clocks.sm,power.draw,temperature.gpu"


class PowerSampler:
    """Polls ``nvidia-smi`` (SM MHz, W, °C) every ``period`` s until stopped."""

    def __init__(self, period: float = 0.1, device: int = 0):
        self.period, self.device = period, device
        self.samples: list[tuple[float, float, float, float]] = []  # (t, MHz, W, °C)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        cmd = ["nvidia-smi", f"--id={self.device}", f"--query-gpu={QUERY}",
               "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
            try:
                mhz, watts, temp = (float(v) for v in out.strip().split(","))
            except ValueError:  # a reading the driver could not give ("[N/A]")
                mhz = watts = temp = float("nan")
            self.samples.append((time.monotonic(), mhz, watts, temp))
            self._stop.wait(self.period)

    def __enter__(self) -> PowerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def sustained(fn, input_sets, seconds: float = 3.0, batch: int = 20) -> dict:
    """``fn`` back to back for ``seconds``; µs per call and the second half's median SM
    MHz, W and °C."""
    n_sets = len(input_sets)
    calls = 0
    with PowerSampler() as sampler:
        start_t = time.monotonic()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        while time.monotonic() - start_t < seconds:
            for i in range(batch):
                fn(input_sets[(calls + i) % n_sets])
            calls += batch
            torch.cuda.synchronize()  # keeps the host within one batch of the GPU
        end.record()
        torch.cuda.synchronize()
    half = start_t + seconds / 2
    late = [s for s in sampler.samples if s[0] >= half] or sampler.samples
    return dict(us=start.elapsed_time(end) * 1e3 / calls, calls=calls,
                mhz=statistics.median(s[1] for s in late),
                watts=statistics.median(s[2] for s in late),
                celsius=statistics.median(s[3] for s in late))


def sustained_rows(fns: dict, names, seconds: float, batch: int) -> list[list]:
    """``[name, ms per call, SM MHz, W]`` of ``sustained`` for each of ``names`` in ``fns``
    (functions of one ignored argument), printed as a table and returned."""
    from cute_kernels.bench import format_table

    rows = []
    for name in names:
        p = sustained(fns[name], [None], seconds, batch=batch)
        rows.append([name, p["us"] / 1e3, p["mhz"], p["watts"]])
    print(format_table(["back to back", "ms per call", "SM MHz", "W"], rows))
    return rows
