"""pack_mask / unpack_mask throughput vs a torch.compile'd pack and the device's copy bandwidth.

    python perf/bitpack.py [--out perf/results] [--quick]

Prints a table, writes bitpack.json and bitpack.png into --out. Method: cute_kernels/bench.py
(interleaved contenders, warm-up, medians, input rotation over 2x L2).
"""

from __future__ import annotations

import argparse
import datetime

import torch

from cute_kernels.bench import commit_id, device_name, format_table, plot_lines, save_results
from cute_kernels.suites import bitpack_rows, copy_bandwidth_gbs, gbs

SHAPES = [(1024, 4096), (4096, 4096), (8192, 8192), (16384, 16384), (32768, 32768),
          (4096, 4097), (16384, 16383)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="perf/results")
    ap.add_argument("--quick", action="store_true", help="three shapes, fewer rounds")
    args = ap.parse_args()
    shapes = SHAPES[1:4:2] + SHAPES[-1:] if args.quick else SHAPES
    ceiling = copy_bandwidth_gbs()
    rows = bitpack_rows(shapes, rounds=10 if args.quick else 30)
    table = []
    for row in rows:
        ours, base, copy = gbs(row, "cute"), gbs(row, "torch.compile"), gbs(row, "copy")
        table.append([row.label, row.timings["cute"].median_ms * 1e3, ours, base, ours / base,
                      copy, ours / ceiling])
    headers = ["op", "us", "GB/s", "torch.compile GB/s", "vs compile", "copy same bytes GB/s",
               "of copy BW"]
    print(f"{device_name()} | large-copy bandwidth {ceiling:.0f} GB/s (read+write) | "
          f"commit {commit_id()} | {datetime.date.today()}\n")
    print(format_table(headers, table))
    payload = {"device": device_name(), "commit": commit_id(), "date": str(datetime.date.today()),
               "torch": torch.__version__, "copy_bandwidth_gbs": ceiling,
               "headers": headers, "rows": table, "timings": rows}
    print("wrote", save_results(args.out, "bitpack", payload))
    for kind in ("pack_mask", "unpack_mask"):
        sel = [r for r in rows if r.label.startswith(kind)]
        png = plot_lines(f"{args.out}/bitpack_{kind}.png", f"{kind} on {device_name()}",
                         [r.label.split()[1] for r in sel],
                         {"cute-kernels": [gbs(r, "cute") for r in sel],
                          "torch.compile": [gbs(r, "torch.compile") for r in sel]},
                         "GB/s (bytes read + written)", ("copy bandwidth", ceiling))
        if png:
            print("wrote", png)


if __name__ == "__main__":
    main()
