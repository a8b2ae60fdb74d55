"""perf/gpu_power.py on the CPU: what the sampler makes of ``nvidia-smi``'s lines (readings,
"[N/A]", a missing tool) and which samples ``sustained`` keeps. The sampling of a real GPU
needs one (docs/gpu.md)."""

import math
import subprocess
import types

from perf_scripts import load_perf_script  # tests/ is on pytest's path

gpu_power = load_perf_script("gpu_power")


def fake_smi(lines):
    """``subprocess.run`` answering the sampler's queries with ``lines`` in turn (the last
    one repeated), recording the commands."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        out = lines[min(len(calls) - 1, len(lines) - 1)]
        return types.SimpleNamespace(stdout=out, returncode=0)
    return run, calls


def test_sampler_parses_readings_and_marks_unreadable_ones(monkeypatch):
    run, calls = fake_smi(["1410, 697.30, 55\n", "[N/A], [N/A], 56\n", "1980, 190.25, 57\n"])
    monkeypatch.setattr(subprocess, "run", run)
    sampler = gpu_power.PowerSampler(period=0.001, device=3)
    with sampler:
        while len(sampler.samples) < 3:
            pass
    first, second, third = sampler.samples[:3]
    assert first[1:] == (1410.0, 697.3, 55.0)
    assert all(math.isnan(v) for v in second[1:])  # one field unreadable: the whole sample
    assert third[1:] == (1980.0, 190.25, 57.0)
    assert [s[0] for s in sampler.samples] == sorted(s[0] for s in sampler.samples)
    assert calls[0][:2] == ["nvidia-smi", "--id=3"]
    assert f"--query-gpu={gpu_power.QUERY}" in calls[0]


def test_sampler_stops_when_the_block_ends(monkeypatch):
    run, _ = fake_smi(["1500, 600, 50\n"])
    monkeypatch.setattr(subprocess, "run", run)
    sampler = gpu_power.PowerSampler(period=0.001)
    with sampler:
        while not sampler.samples:
            pass
    count = len(sampler.samples)
    assert not sampler._thread.is_alive()
    assert len(sampler.samples) == count


def test_sustained_keeps_the_second_half(monkeypatch):
    """``sustained`` reports the medians of the samples taken after half the run: the clock
    settles there. Here the clock drops from 1,980 to 1,400 MHz halfway."""
    clock = {"t": 0.0}

    def monotonic():
        clock["t"] += 0.01
        return clock["t"]

    class Event:
        def __init__(self, **kwargs):
            self.t = 0.0

        def record(self):
            self.t = clock["t"]

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    fake_cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None)
    monkeypatch.setattr(gpu_power.torch, "cuda", fake_cuda)
    monkeypatch.setattr(gpu_power.time, "monotonic", monotonic)

    class Sampler:
        def __init__(self, *args, **kwargs):
            self.samples = []

        def __enter__(self):
            self.start = clock["t"]
            return self

        def __exit__(self, *exc):
            # ten samples at full clock in the first half of the 0.5 s run, six throttled
            # ones in the second: the median of all of them would be 1,980
            self.samples = ([(self.start + i * 0.025, 1980.0, 700.0, 60.0) for i in range(10)]
                            + [(self.start + 0.3 + j * 0.03, 1400.0, 700.0, 60.0)
                               for j in range(6)])

    monkeypatch.setattr(gpu_power, "PowerSampler", Sampler)
    calls = []
    result = gpu_power.sustained(lambda s: calls.append(s), ["a", "b"], seconds=0.5, batch=4)
    assert result["mhz"] == 1400.0 and result["watts"] == 700.0
    assert result["calls"] == len(calls) and len(calls) % 4 == 0 and calls[:3] == ["a", "b",
                                                                                   "a"]
    assert result["us"] > 0


def test_sustained_rows_runs_each_named_function(monkeypatch, capsys):
    """``sustained_rows``: one back-to-back run per name, in order, its µs reported as ms."""
    runs = []

    def fake_sustained(fn, sets, seconds, batch):
        fn(None)
        runs.append((seconds, batch))
        return dict(us=2500.0, mhz=1605.0, watts=699.0, celsius=60.0)

    monkeypatch.setattr(gpu_power, "sustained", fake_sustained)
    called = []
    fns = {name: (lambda _, name=name: called.append(name)) for name in ("a", "b", "c")}
    rows = gpu_power.sustained_rows(fns, ["c", "a"], 3.0, batch=4)
    assert called == ["c", "a"] and runs == [(3.0, 4)] * 2
    assert rows == [["c", 2.5, 1605.0, 699.0], ["a", 2.5, 1605.0, 699.0]]
    assert "SM MHz" in capsys.readouterr().out
