"""``cute-kernels`` command line (also ``python -m cute_kernels``).

  cute-kernels demo                       run every kernel vs its baseline (GPU) or show the
                                          instruction mix of every kernel's PTX (no GPU)
  cute-kernels ptx KERNEL --arch sm_90a   compile KERNEL for an arch (no GPU needed), print PTX
  cute-kernels ptx --list                 list kernel names
  cute-kernels layout NAME --out f.svg    draw a named TV layout (.svg, or .png with matplotlib)
  cute-kernels cache clear|info           the on-disk compile cache
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _cmd_ptx(args) -> int:
    from .registry import entries, ptx_for

    if args.list or not args.kernel:
        for e in entries().values():
            print(f"{e.name:<14} {e.summary}  (variants: {', '.join(e.variants)})")
        return 0
    ptx = ptx_for(args.kernel, args.arch, args.variant)
    text = "\n".join(f"// ===== {args.kernel} [{v}] for {args.arch} =====\n{p}"
                     for v, p in ptx.items())
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out} ({len(text)} chars, variants: {', '.join(ptx)})")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_layout(args) -> int:
    from layouts import get_tv_layout, layout_names
    from layouts.visualize import render

    if args.list or not args.name:
        print("\n".join(layout_names() + [f"swizzle_{m}" for m in ("32B", "64B", "128B")]))
        return 0
    if args.name.startswith("swizzle_"):
        return _render_swizzle(args.name.removeprefix("swizzle_"), args.out)
    tv = get_tv_layout(args.name)
    out = args.out or f"{tv.name}.svg"
    render(tv, out)
    print(f"{tv.name}: {tv.layout}  tile {tv.tile[0]}x{tv.tile[1]} -> {out}")
    return 0


def _render_swizzle(mode: str, out: str | None) -> int:
    from layouts import swizzle_for
    from layouts.swizzle import SWIZZLE_ROW_BYTES
    from layouts.visualize import swizzle_to_svg

    sw = swizzle_for(mode, 2)
    out = out or f"swizzle_{mode}.svg"
    if not out.endswith(".svg"):
        raise ValueError("swizzle pictures are written as .svg")
    with open(out, "w") as f:
        f.write(swizzle_to_svg(sw, row_bytes=SWIZZLE_ROW_BYTES[mode]))
    print(f"{sw} (bf16) -> {out}")
    return 0


def _cmd_cache(args) -> int:
    from .runtime.compile import cache_dir, clear_disk_cache

    if args.action == "clear":
        print(f"removed {clear_disk_cache()} files from {cache_dir()}")
    else:
        d = cache_dir()
        files = list(d.glob("*.o")) if d.is_dir() else []
        print(f"{d}: {len(files)} kernels, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB")
    return 0


def _cmd_demo(args) -> int:
    import torch

    if torch.cuda.is_available() and not args.cpu:
        return _demo_gpu()
    return _demo_cpu()


def _demo_cpu() -> int:
    from .bench import format_table
    from .registry import INSTRUCTIONS, entries, instruction_mix, ptx_for

    print("No GPU: compiling every kernel for sm_80 and sm_90a and counting PTX instructions.\n")
    rows = []
    for entry in entries().values():
        for target in ("sm_80", "sm_90a"):
            for variant in entry.variants:
                t0 = time.perf_counter()
                (ptx,) = ptx_for(entry.name, target, variant).values()
                seconds = time.perf_counter() - t0
                rows.append([entry.name, variant, target, *instruction_mix(ptx).values(),
                             f"{seconds:.2f}"])
    print(format_table(["kernel", "variant", "arch", *INSTRUCTIONS, "compile s"], rows))
    return 0


def _demo_gpu() -> int:
    import torch

    from .bench import device_name, format_table
    from .suites import bitpack_rows, copy_bandwidth_gbs, gbs

    copy = copy_bandwidth_gbs()
    print(f"{device_name()}: device copy bandwidth {copy:.0f} GB/s (read + write)\n")
    rows = []
    for row in bitpack_rows([(16384, 16384), (8192, 8191)], rounds=15):
        ours, base = gbs(row, "cute"), gbs(row, "torch.compile")
        rows.append([row.label, row.timings["cute"].median_ms, ours, base, ours / base,
                     ours / copy])
    print(format_table(["op", "ms", "GB/s", "torch.compile GB/s", "vs torch", "vs copy"], rows))

    from .runtime.arch import device_target
    from .suites import gemm_rows, tflops

    native, _ = device_target(torch.device("cuda"))
    print()
    rows = []
    for path in dict.fromkeys([native, "ampere"]):
        for row in gemm_rows([(8192, 8192, 8192), (4096, 14336, 4096)], path=path, rounds=8):
            ours, base = tflops(row, "cute"), tflops(row, "cuBLAS")
            rows.append([f"linear {row.label}", path, row.timings["cute"].median_ms, ours, base,
                         ours / base])
    print(format_table(["op", "path", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "vs cuBLAS"], rows))

    from .suites import gated_mlp_rows

    print()
    rows = []
    for path in dict.fromkeys([native, "ampere"]):
        for row in gated_mlp_rows([("8B", 4096, 4096, 14336)], path=path, rounds=8):
            base = [n for n in row.timings if n not in ("cute", "torch")][0]
            rows.append([f"gated_mlp_up {row.label}", path, row.timings["cute"].median_ms,
                         tflops(row, "cute"), f"{tflops(row, base):.1f} ({base})",
                         row.timings[base].median_ms / row.timings["cute"].median_ms,
                         row.work["peak_cute"] / row.work[f"peak_{base}"]])
    print(format_table(["op", "path", "ms", "TFLOP/s", "baseline TFLOP/s", "speedup",
                        "peak mem ratio"], rows))

    from .suites import attention_rows

    print()
    rows = []
    for path in dict.fromkeys([native, "ampere"]):
        for row in attention_rows([(2, 16, 8192, 128, False), (2, 16, 8192, 128, True)],
                                  path=path, rounds=6):
            colsum = row.timings.get("cute-colsum")
            rows.append([f"attention {row.label}", path, row.timings["cute"].median_ms,
                         tflops(row, "cute"), tflops(row, "SDPA-cuDNN"),
                         tflops(row, "cute") / tflops(row, "SDPA-cuDNN"),
                         f"{colsum.median_ms / row.timings['cute'].median_ms:.2f}" if colsum
                         else "-"])
    print(format_table(["op", "path", "ms", "TFLOP/s", "cuDNN TFLOP/s", "vs cuDNN",
                        "colsum / plain"], rows))
    torch.cuda.synchronize()
    _print_cache_stats()
    return 0


def _print_cache_stats() -> None:
    from .runtime.compile import KERNELS, cache_dir

    st = KERNELS.stats
    print(f"\ncompile cache: {st['compiles']} compiled ({st['compile_s']:.1f} s), "
          f"{st['disk_hits']} loaded from {cache_dir()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cute-kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ptx", help="compile a kernel for an arch (no GPU needed) and print PTX")
    p.add_argument("kernel", nargs="?")
    p.add_argument("--arch", default="sm_90a", help="sm_80, sm_86, sm_89 or sm_90a")
    p.add_argument("--variant", help="one variant of the kernel (default: all)")
    p.add_argument("--out", help="write the PTX to this file")
    p.add_argument("--list", action="store_true", help="list the kernels")
    p.set_defaults(func=_cmd_ptx)

    p = sub.add_parser("layout", help="render a named TV layout to SVG/PNG")
    p.add_argument("name", nargs="?")
    p.add_argument("--out", help="output file (.svg or .png); default NAME.svg")
    p.add_argument("--list", action="store_true", help="list layout names")
    p.set_defaults(func=_cmd_layout)

    p = sub.add_parser("demo", help="run every kernel vs its baseline (GPU) or show PTX mix")
    p.add_argument("--cpu", action="store_true", help="the no-GPU report even on a GPU machine")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("cache", help="the on-disk compile cache")
    p.add_argument("action", choices=["clear", "info"])
    p.set_defaults(func=_cmd_cache)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as e:
        print(f"cute-kernels: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
