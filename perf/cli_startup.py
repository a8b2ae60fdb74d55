"""Start-up time of the quick CLI commands: whole processes, as a user runs them.

    python perf/cli_startup.py [--runs 10]

Each command runs ``--runs`` times (after one warm-up run) as ``python -m cute_kernels ...``
in a fresh interpreter; the table gives the median, min and max wall time of the whole
process. Rows for scale: the bare interpreter and ``import torch`` (which every command paid
before the imports were made lazy). Target: every quick command's median under 1 s; the exit
status is 1 when one is not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 1.0


def wall_times(cmd: list[str], runs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        ROOT, os.environ.get("PYTHONPATH")]))}
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        elapsed = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
        if i:  # the first run warms the file cache and writes the .pyc files
            times.append(elapsed)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    py = [sys.executable]
    cli = [*py, "-m", "cute_kernels"]
    with tempfile.TemporaryDirectory() as tmp:
        quick = [
            ("cute-kernels --help", [*cli, "--help"]),
            ("cute-kernels ptx --help", [*cli, "ptx", "--help"]),
            ("cute-kernels ptx --list", [*cli, "ptx", "--list"]),
            ("cute-kernels layout --list", [*cli, "layout", "--list"]),
            ("cute-kernels layout sm80_gated_c --out g.svg",
             [*cli, "layout", "sm80_gated_c", "--out", os.path.join(tmp, "g.svg")]),
            ("cute-kernels cache info", [*cli, "cache", "info"]),
        ]
        scale = [("python -c pass (the interpreter alone)", [*py, "-c", "pass"]),
                 ("python -c 'import torch' (for scale)", [*py, "-c", "import torch"])]
        rows, slow = [], []
        for label, cmd in quick + scale:
            t = wall_times(cmd, args.runs)
            med = statistics.median(t)
            rows.append((label, med, min(t), max(t)))
            if (label, cmd) in quick and med >= TARGET_S:
                slow.append(label)
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}}  median s    min s    max s   ({args.runs} runs each)")
    for label, med, lo, hi in rows:
        print(f"{label:<{width}}  {med:8.3f} {lo:8.3f} {hi:8.3f}")
    if slow:
        print(f"\nover the {TARGET_S:.0f} s target: {', '.join(slow)}")
        return 1
    print(f"\nevery quick command under the {TARGET_S:.0f} s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
