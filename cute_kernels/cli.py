"""The ``cute-kernels`` command line (also ``python -m cute_kernels``).

Start-up is kept short: this module imports only the standard library at the top, and each
command imports what it needs (torch and the DSL only for ``demo`` and for compiling in
``ptx``), so ``--help``, ``ptx --list``, ``layout`` and ``cache`` answer in a fraction of a
second (``perf/cli_startup.py`` measures it). Every user error ends in one
``cute-kernels: error: ...`` line on stderr and exit status 2, checked before anything compiles.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DESCRIPTION = """\
GPU kernels written with NVIDIA's CuTe Python DSL, called from PyTorch.

examples:
  cute-kernels demo                        every kernel vs its baseline (GPU), or the
                                           instruction mix of every kernel's PTX (no GPU)
  cute-kernels ptx --list                  the kernels and their variants
  cute-kernels ptx gemm --arch sm_80       compile for an arch (no GPU needed), print the PTX
  cute-kernels layout --list               the layouts and swizzles that can be drawn
  cute-kernels layout sm80_gated_c --out g.svg
  cute-kernels cache info                  the on-disk compile cache
"""

DEFAULT_ARCH = "sm_90a"


class CLIError(Exception):
    """A user error: printed as one ``cute-kernels: error:`` line, exit status 2."""


def _check_out(path: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """Refuse an ``--out`` that cannot be written, before any work is done."""
    out = Path(path)
    if suffixes and out.suffix.lower() not in suffixes:
        raise CLIError(f"--out must end in {' or '.join(suffixes)}, got {out.name!r}")
    folder = out.parent
    if not folder.is_dir():
        raise CLIError(f"--out {path}: folder {str(folder)!r} does not exist")
    if out.is_dir():
        raise CLIError(f"--out {path} is a folder; give a file name")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"--out {path}: folder {str(folder)!r} is not writable")
    return out


def _cmd_ptx(args) -> int:
    from .registry import entries
    from .runtime.arch import PATH_OF_TARGET

    table = entries()
    if args.list or not args.kernel:
        width = max(len(name) for name in table)
        for e in table.values():
            print(f"{e.name:<{width}}  {e.summary}  (variants: {', '.join(e.variants)})")
        return 0
    # every argument is checked before the (slow) compile
    if args.kernel not in table:
        raise CLIError(f"unknown kernel {args.kernel!r}; known: {', '.join(table)}")
    if args.arch not in PATH_OF_TARGET:
        raise CLIError(f"--arch must be one of {', '.join(PATH_OF_TARGET)}, got {args.arch!r}")
    variants = table[args.kernel].variants
    if args.variant is not None and args.variant not in variants:
        raise CLIError(f"{args.kernel} has variants {', '.join(variants)}, not {args.variant!r}")
    out = _check_out(args.out) if args.out else None

    from .registry import ptx_for

    ptx = ptx_for(args.kernel, args.arch, args.variant)
    text = "\n".join(f"// ===== {args.kernel} [{v}] for {args.arch} =====\n{p}"
                     for v, p in ptx.items())
    if out:
        out.write_text(text)
        print(f"wrote {out} ({len(text)} chars, variants: {', '.join(ptx)})")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_layout(args) -> int:
    import layouts

    if args.list or not args.name:
        names = layouts.catalog()
        width = max(len(n) for n in names)
        for name, what in names.items():
            print(f"{name:<{width}}  {what}")
        return 0
    try:
        obj = layouts.lookup(args.name)
    except ValueError as e:
        raise CLIError(str(e)) from None
    out = _check_out(args.out or f"{args.name}.svg", (".svg", ".png"))
    if out.suffix.lower() == ".png":
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CLIError("PNG output needs matplotlib (pip install matplotlib), or write "
                           ".svg") from None
    layouts.render(obj, out)
    what = (f"{obj.layout}  tile {obj.tile[0]}x{obj.tile[1]}" if isinstance(obj, layouts.TVLayout)
            else f"{obj.swizzle} on bf16, rows of {obj.row_bytes} B")
    print(f"{obj.name}: {what} -> {out}")
    return 0


def _cmd_cache(args) -> int:
    from .runtime.compile import (
        ENV_DISK_CACHE,
        cache_dir,
        cached_entries,
        clear_disk_cache,
        disk_cache_enabled,
    )

    d = cache_dir()
    if args.action == "clear":
        print(f"removed {clear_disk_cache()} files from {d}")
        return 0
    files = cached_entries()
    size = f"{len(files)} kernels, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB"
    if disk_cache_enabled():
        print(f"{d}: {size}")
    else:
        print(f"the disk cache is off ({ENV_DISK_CACHE}={os.environ[ENV_DISK_CACHE]}): kernels are "
              f"compiled in every process, nothing is read from or written to {d} ({size} "
              "there from earlier runs)")
    return 0


def _cmd_schedule(args) -> int:
    """How the Hopper GEMM would run an (M, N, K) x batch problem (no GPU needed)."""
    from .tuning.gemm import gated_a_rows, schedule

    for name, value in (("M", args.m), ("N", args.n), ("K", args.k), ("--batch", args.batch),
                        ("--sms", args.sms)):
        if value < 1:
            raise CLIError(f"{name} must be >= 1, got {value}")
    plan = schedule(args.m, args.n, args.k, args.batch, args.sms, skinny=not args.gated,
                    gated=args.gated)
    a_rows = gated_a_rows(args.m, plan.tile) if args.gated else None
    print(f"{'gated_mlp_up' if args.gated else 'linear'} {args.m}x{args.n}x{args.k}"
          + (f" x{args.batch}" if args.batch > 1 else "") + f" on {args.sms} SMs: "
          + plan.describe() + (f", {a_rows} rows of A loaded per tile" if a_rows else ""))
    return 0


def _cmd_attention_schedule(args) -> int:
    """How ``attention`` would run a (B, H, S_q, D) x (B, H_kv, S_kv, D) problem (no GPU
    needed): the kernel's tiles and schedule, GQA packing, split-KV."""
    from .ops.attention import HEAD_DIMS, attention_route, default_splits

    for name, value in (("B", args.b), ("H", args.h), ("H_KV", args.h_kv), ("S_Q", args.s_q),
                        ("S_KV", args.s_kv), ("--sms", args.sms)):
        if value < 1:
            raise CLIError(f"{name} must be >= 1, got {value}")
    if args.hbm_gbps is not None and not args.hbm_gbps > 0:
        raise CLIError(f"--hbm-gbps must be > 0, got {args.hbm_gbps}")
    if args.h % args.h_kv:
        raise CLIError(f"H ({args.h}) must be a multiple of H_KV ({args.h_kv})")
    if args.d not in HEAD_DIMS:
        raise CLIError(f"D must be one of {HEAD_DIMS}, got {args.d}")
    if args.splits is not None and args.splits < 1:
        raise CLIError(f"--splits must be >= 1, got {args.splits}")
    splits = args.splits
    if splits is None:  # attention's num_splits=None
        splits = default_splits(args.b, args.h, args.s_q, args.d, args.h_kv, args.s_kv,
                                args.causal, args.sms, args.path == "hopper",
                                hbm=args.hbm_gbps)
    route = attention_route(args.b, args.h, args.h_kv, args.s_q, args.s_kv, args.d,
                            args.causal, splits, args.path == "hopper")
    print(f"attention B{args.b} H{args.h} H_kv{args.h_kv} S_q{args.s_q} S_kv{args.s_kv} "
          f"D{args.d}{' causal' if args.causal else ''} on {args.sms} SMs ({args.path}): "
          f"{route.describe(args.d, args.path)}")
    if route.cluster:  # the GPU's own count decides; none is at hand here
        print(f"  (clusters of {route.splits} CTAs: on a GPU the op first checks that it holds "
              f"them all at once, else it takes the combine kernel)")
    return 0


def _cmd_demo(args) -> int:
    import torch

    from .registry import entries

    names = args.kernel or list(entries())
    unknown = [n for n in names if n not in entries()]
    if unknown:
        raise CLIError(f"--kernel: unknown kernel(s) {', '.join(unknown)}; pick from "
                       f"{', '.join(entries())}")
    if torch.cuda.is_available() and not args.cpu:
        if args.kernel:
            raise CLIError("--kernel selects kernels of the no-GPU PTX report: add --cpu")
        return _demo_gpu()
    return _demo_cpu(names)


def _demo_cpu(names) -> int:
    from .bench import format_table
    from .registry import INSTRUCTIONS, entries, instruction_mix, ptx_for

    which = "every kernel" if len(names) == len(entries()) else ", ".join(names)
    print(f"No GPU: compiling {which} for sm_80 and sm_90a and counting PTX instructions.\n")
    rows = []
    for entry in (entries()[name] for name in names):
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

    from .suites import column_sparse_rows

    print()
    rows = []
    for row in column_sparse_rows([(1, 24, 32768, 128)]):
        sparse = row.timings["cute sparse"].median_ms
        rows.append([f"column_sparse_attention {row.label}", sparse,
                     row.timings["SDPA-cuDNN"].median_ms / sparse,
                     row.timings["cute dense"].median_ms / sparse])
    print(format_table(["op", "ms", "vs cuDNN dense", "vs our dense"], rows))
    torch.cuda.synchronize()
    _print_cache_stats()
    return 0


def _print_cache_stats() -> None:
    from .runtime.compile import KERNELS, cache_dir

    st = KERNELS.stats
    print(f"\ncompile cache: {st['compiles']} compiled ({st['compile_s']:.1f} s), "
          f"{st['disk_hits']} loaded from {cache_dir()}")


def main(argv: list[str] | None = None) -> int:
    from .runtime.arch import PATH_OF_TARGET

    parser = argparse.ArgumentParser(prog="cute-kernels", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ptx", help="compile a kernel for an arch (no GPU needed) and print PTX",
                       description="Compile KERNEL for an arch with the CuTe DSL (no GPU "
                       "needed) and print its PTX, one section per variant.")
    p.add_argument("kernel", nargs="?", metavar="KERNEL",
                   help="kernel name, as listed by --list (e.g. gemm, attention, pack_mask)")
    p.add_argument("--arch", default=DEFAULT_ARCH,
                   help=f"one of {', '.join(PATH_OF_TARGET)} (default: {DEFAULT_ARCH})")
    p.add_argument("--variant", help="one variant of the kernel (default: all; see --list)")
    p.add_argument("--out", metavar="FILE", help="write the PTX to FILE instead of stdout")
    p.add_argument("--list", action="store_true", help="list the kernels and their variants")
    p.set_defaults(func=_cmd_ptx)

    p = sub.add_parser("layout", help="draw a named TV layout or swizzle (SVG or PNG)",
                       description="Draw a named MMA TV layout or smem swizzle: each cell "
                       "names the thread and register (or the physical chunk) it holds.")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="a name from --list, with N filled in where it has one (sm90_gated_c_n64)")
    p.add_argument("--out", metavar="FILE",
                   help="FILE.svg, or FILE.png with matplotlib installed (default: NAME.svg)")
    p.add_argument("--list", action="store_true", help="list the names")
    p.set_defaults(func=_cmd_layout)

    p = sub.add_parser("demo", help="run every kernel vs its baseline (GPU) or show PTX mix")
    p.add_argument("--cpu", action="store_true", help="the no-GPU report even on a GPU machine")
    p.add_argument("--kernel", action="append", metavar="NAME",
                   help="the no-GPU report for this kernel only (repeatable; names: "
                        "cute-kernels ptx --list)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("schedule", help="how the Hopper GEMM would run an M x N x K problem",
                       description="Print the Hopper GEMM schedule of linear(x (M, K), "
                       "w (N, K)): tile, cluster, CTAs, pipeline stages, swap-AB, split-K "
                       "(no GPU needed).")
    p.add_argument("m", type=int, metavar="M")
    p.add_argument("n", type=int, metavar="N")
    p.add_argument("k", type=int, metavar="K")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--sms", type=int, default=132, help="SM count (default: 132, an H100/H200)")
    p.add_argument("--gated", action="store_true",
                   help="the gated MLP's schedule (never swapped or split)")
    p.set_defaults(func=_cmd_schedule)

    p = sub.add_parser("attention-schedule", help="how attention would run a problem",
                       description="Print how attention(q (B, H, S_Q, D), k and v (B, H_KV, "
                       "S_KV, D)) would run: the kernel's tiles and schedule, GQA packing, "
                       "split-KV (no GPU needed).")
    for name in ("B", "H", "H_KV", "S_Q", "S_KV", "D"):
        p.add_argument(name.lower(), type=int, metavar=name)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--splits", type=int, default=None,
                   help="num_splits (default: the op's choice for --sms SMs)")
    p.add_argument("--sms", type=int, default=132, help="SM count (default: 132, an H100/H200)")
    p.add_argument("--hbm-gbps", type=float, default=None,
                   help="the GPU's peak memory GB/s for the split choice (H100 3352, H200 "
                        "4915; default: unknown)")
    p.add_argument("--path", choices=["hopper", "ampere"], default="hopper")
    p.set_defaults(func=_cmd_attention_schedule)

    p = sub.add_parser("cache", help="the on-disk compile cache",
                       description="The on-disk compile cache ($CUTE_KERNELS_CACHE_DIR, default "
                       "~/.cache/cute_kernels; CUTE_KERNELS_DISK_CACHE=0 turns it off).")
    p.add_argument("action", choices=["clear", "info"])
    p.set_defaults(func=_cmd_cache)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (CLIError, ValueError, TypeError, OSError) as e:
        print(f"cute-kernels: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
