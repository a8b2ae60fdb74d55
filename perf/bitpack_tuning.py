"""Compare configurations of the odd-N (rows) bitpack kernels in one run.

    python perf/bitpack_tuning.py

Compiles each configuration of PackMaskRows / UnpackMaskRows directly (bypassing the op's
default) and times them interleaved on the same inputs; prints GB/s per configuration.
"""

from __future__ import annotations

import torch

from cute_kernels.bench import bench_interleaved, format_table, input_sets_needed
from cute_kernels.kernels.bitpack import PackMaskRows, UnpackMaskRows
from cute_kernels.ops.bitpack import pack_mask_reference
from cute_kernels.runtime.arch import device_target
from cute_kernels.runtime.bridge import env_stream, fake_rows
from cute_kernels.runtime.compile import Build, compile_build

PACK_CONFIGS = [dict(threads=128), dict(threads=256), dict(threads=512)]
UNPACK_CONFIGS = [dict(threads=128, unroll=4), dict(threads=128, unroll=8),
                  dict(threads=128, unroll=16), dict(threads=256, unroll=8)]


def main(r: int = 16384, n: int = 16383) -> None:
    _, target = device_target(torch.device("cuda"))
    mask_f, packed_f = fake_rows(torch.uint8, compact=False), fake_rows(torch.uint8, compact=True)
    packs = {f"pack {c}": compile_build(Build(PackMaskRows(**c), (mask_f, packed_f, env_stream())),
                                        target) for c in PACK_CONFIGS}
    unpacks = {f"unpack {c}": compile_build(
        Build(UnpackMaskRows(**c), (packed_f, mask_f, env_stream())), target)
        for c in UNPACK_CONFIGS}
    moved = r * n + r * ((n + 7) // 8)
    sets = []
    for _ in range(input_sets_needed(moved)):
        mask = torch.rand(r, n, device="cuda") < 0.5
        sets.append((mask.view(torch.uint8), pack_mask_reference(mask)))
    out_p = torch.empty(r, (n + 7) // 8, dtype=torch.uint8, device="cuda")
    out_m = torch.empty(r, n, dtype=torch.uint8, device="cuda")
    fns = {k: (lambda s, f=f: f(s[0], out_p)) for k, f in packs.items()}
    fns |= {k: (lambda s, f=f: f(s[1], out_m)) for k, f in unpacks.items()}
    t = bench_interleaved(fns, sets, rounds=20)
    rows = [[k, v.median_ms * 1e3, moved / (v.median_ms * 1e-3) / 1e9] for k, v in t.items()]
    print(f"rows kernels, {r}x{n}:")
    print(format_table(["config", "us", "GB/s"], rows))


if __name__ == "__main__":
    main()
