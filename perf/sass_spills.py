"""Where a kernel spills: its SASS around every local-memory access (no GPU needed, but
``ptxas`` and ``cuobjdump`` from a CUDA toolkit are; the device machine has both).

    python perf/sass_spills.py [--target sm_90a] [--context 6] BUILD [BUILD ...]

BUILD names one of these builds: ``dense-persistent[-causal][-d64][-sync]`` (the Hopper
attention kernel's persistent configuration, ``-sync`` with the consumers storing O instead of
the async store warp),
``dense[-causal][-d64]``, ``block-sparse[-persistent]``.
For each it prints the ptxas summary, then each ``STL``/``LDL`` with the instructions around
it. It also says which side of the kernel's ``USETMAXREG`` (``setmaxnreg``) instructions each
access falls on: that is where the persistent schedule's extra spills live, for the producer
(40 registers) or the consumers (232).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile


def build(name: str):
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.tuning.attention import hopper_config

    causal, d = "-causal" in name, 64 if "-d64" in name else 128
    if name.startswith("block-sparse"):
        import cutlass

        from cute_kernels.kernels.attention.sm90 import AttentionSm90
        from cute_kernels.ops.attention import schedule_args
        from cute_kernels.runtime.bridge import fake_bhsd, fake_compact
        from cute_kernels.runtime.compile import Build
        from cute_kernels.runtime.launch import launch_args

        kernel = AttentionSm90(d, False, block_sparse=True, overlap=d == 128,
                               persistent="-persistent" in name)
        lists = dict(mFullIndices=fake_compact(torch.int32, 4),
                     mFullCounts=fake_compact(torch.int32, 3), mDocIds=None)
        return Build(kernel, launch_args(
            kernel, mQ=fake_bhsd(torch.bfloat16, d), mK=fake_bhsd(torch.bfloat16, d),
            mV=fake_bhsd(torch.bfloat16, d), mO=fake_bhsd(torch.bfloat16, d),
            mLSE=fake_compact(torch.float32, 3), mPrevLSE=None, mColsum=None,
            mIndices=fake_compact(torch.int32, 4), mCounts=fake_compact(torch.int32, 3),
            scale=cutlass.Float32(1.0), out_scale=None, **{**schedule_args(kernel), **lists}))
    config = dict(hopper_config(d, causal, False, 192, persistent="persistent" in name))
    if "-sync" in name:  # the consumers store O themselves
        config["async_store"] = False
    return make_build("hopper", torch.bfloat16, d, causal, config=config)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--context", type=int, default=6)
    args = ap.parse_args()
    missing = [t for t in ("ptxas", "cuobjdump") if shutil.which(t) is None]
    if missing:
        sys.exit(f"perf/sass_spills.py needs {' and '.join(missing)} (a CUDA toolkit)")
    from cute_kernels.runtime.compile import compile_ptx

    for name in args.builds:
        ptx = compile_ptx(build(name), args.target)
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/k.ptx", "w") as f:
                f.write(ptx)
            info = subprocess.run(["ptxas", f"-arch={args.target}", "-v", f"{tmp}/k.ptx", "-o",
                                   f"{tmp}/k.cubin"], capture_output=True, text=True).stderr
            sass = subprocess.run(["cuobjdump", "-sass", f"{tmp}/k.cubin"],
                                  capture_output=True, text=True).stdout.splitlines()
        print(f"=== {name} ({args.target})")
        print("\n".join(line for line in info.splitlines() if "spill" in line or "Used" in line))
        regions = [i for i, line in enumerate(sass) if "USETMAXREG" in line]
        for i, line in enumerate(sass):
            if re.search(r"\b(STL|LDL)\b", line):
                side = sum(1 for r in regions if r < i)
                print(f"\n-- line {i}, after {side} of {len(regions)} USETMAXREG")
                lo, hi = max(0, i - args.context), min(len(sass), i + args.context + 1)
                print("\n".join(sass[lo:hi]))


if __name__ == "__main__":
    main()
