"""Compare two runs of the perf scripts (e.g. before and after a refactor, same device call):

    python perf/ab_compare.py BEFORE_DIR AFTER_DIR

Each directory holds the JSON files the perf scripts write (``--out``); rows are matched by
label (first column) and compared on our kernel's median time (second column). Prints one
table per script with after / before and the worst change, and exits 1 when any shape got
slower than ``--tolerance`` (default 2%).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--tolerance", type=float, default=0.02)
    args = ap.parse_args(argv)
    worst_all = 0.0
    for after_path in sorted(Path(args.after).glob("*.json")):
        before_path = Path(args.before) / after_path.name
        if not before_path.exists():
            continue
        before = {r[0]: r[1] for r in json.loads(before_path.read_text())["rows"]}
        after = {r[0]: r[1] for r in json.loads(after_path.read_text())["rows"]}
        print(f"\n{after_path.stem}: ours, median ms")
        print(f"{'shape':<34} {'before':>9} {'after':>9} {'after/before':>13}")
        worst = 0.0
        for label, ms in after.items():
            if label not in before:
                continue
            ratio = ms / before[label]
            worst = max(worst, ratio - 1)
            print(f"{label:<34} {before[label]:>9.3f} {ms:>9.3f} {ratio:>13.3f}")
        print(f"worst slowdown: {100 * worst:+.1f}%")
        worst_all = max(worst_all, worst)
    print(f"\nworst slowdown over all scripts: {100 * worst_all:+.1f}% "
          f"(tolerance {100 * args.tolerance:.0f}%)")
    return 1 if worst_all > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
