"""Packed small key blocks (block-sparse attention, issue 15): the K/V loaders and schedules of
the Hopper gather kernel side by side in one run.

    python perf/block_sparse_loaders.py [--seq 8192,32768] [--blocks 16,32,64] [--absent 0.93]
        [--configs "[dict(), dict(gather_tma=False), dict(persistent=True)]"] [--rounds 10]

B 1, H 16, D 128, bf16, random (128, E) block masks with ``absent`` of the blocks dropped
(``perf/block_sparse.py``'s case); the op's packed block lists (``packed_entries``). Each
config is ``hopper_gather_config`` (short tiles where the op takes them, ``entry_keys`` E)
updated by the dict: ``gather_tma`` False is the row gather (cp.async by the producer
warpgroup), True one TMA box per listed block; ``persistent`` the CTAs walking
``snake_walks`` of the longest-first order (else the ordered grid); ``short`` forces the tile
choice; ``walks="lpt"`` deals a persistent kernel's tiles on the host (``host_walks``).
Contenders, interleaved (warm-up, medians, inputs rotated over 2x the L2): our dense kernel,
per block size our dense kernel over as many contiguous keys as a list holds (the ceiling of
a packed kernel: no list), then every config. Printed: ms, ratio to dense, of ideal = (dense
/ ours) x visible share, and the max difference to the op's output
(``block_sparse_attention`` as shipped). Writes ``plots/block_sparse_loaders_<gpu>.json``.
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

sys.path.insert(0, "perf")
from block_sparse import B, D, H, random_block_mask  # noqa: E402
from gemm_tuning import parse_configs  # noqa: E402

from cute_kernels.bench import (  # noqa: E402
    bench_interleaved,
    commit_id,
    device_name,
    format_table,
    input_sets_needed,
)

CONFIGS = "[dict(gather_tma=False), dict(), dict(persistent=True), dict(short=False)]"


def kernel_for(config: dict, entry_keys: int, short: bool):
    """(compiled kernel, its config) of one contender."""
    from cute_kernels.ops.column_sparse import make_build
    from cute_kernels.runtime.compile import compile_build
    from cute_kernels.tuning.attention import hopper_gather_config

    config = dict(config)
    config.pop("walks", None)
    config.pop("fixed", None)
    short = config.pop("short", short)
    persistent = config.get("persistent", False)
    cfg = dict(hopper_gather_config(D, 128, short, persistent, entry_keys), **config)
    if not cfg.get("gather_tma"):
        cfg.pop("gather_tma", None)
    build = make_build("hopper", torch.bfloat16, D, 128, False, config=cfg,
                       entry_keys=entry_keys, ordered=not persistent, persistent=persistent,
                       short=short)
    return compile_build(build, "sm_90a"), cfg


def host_walks(counts: torch.Tensor, s: int, cfg: dict, wave: int, fixed: int) -> torch.Tensor:
    """Persistent walks dealt on the host (``tile_order.lpt_walks``, as the op deals a reused
    mask's: ``column_sparse.packed_walks``), a tile costing its key tiles plus ``fixed``;
    ``walks=\"lpt\"`` (and ``fixed``, default ``TILE_FIXED_BLOCKS``) in a config."""
    from cute_kernels.ops.tile_order import group_rows, longest_first_order, lpt_walks

    host = counts.cpu()
    m = -(-s // cfg["block_m"])
    keys = host.index_select(2, group_rows(m, cfg["block_m"], 128, host.shape[2], host.device))
    work = -(-keys // cfg["block_n"])
    return lpt_walks(longest_first_order(keys), work, wave, fixed).to(counts.device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", default="8192,32768")
    ap.add_argument("--blocks", default="32")
    ap.add_argument("--absent", type=float, default=0.93)
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("perf/block_sparse_loaders.py needs a CUDA GPU (docs/gpu.md)")
    import cute_kernels as ck
    from cute_kernels.ops.attention import TILE_FIXED_BLOCKS, attention_params
    from cute_kernels.ops.block_sparse import block_lists, packed_entries
    from cute_kernels.ops.column_sparse import _gather_schedule, _gather_tiling

    params = attention_params()
    configs = parse_configs(args.configs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, records = [], []
    for s in (int(v) for v in args.seq.split(",")):
        sets = [tuple(torch.randn(B, H, s, D, device="cuda", generator=gen).bfloat16()
                      for _ in range(3)) for _ in range(input_sets_needed(3 * B * H * s * D * 2))]
        lse = torch.empty(B, H, s, dtype=torch.float32, device="cuda")
        fns = {"dense": lambda x: ck.attention(*x)}
        meta = {}
        for e in (int(v) for v in args.blocks.split(",")):
            mask = random_block_mask(s, args.absent, e, gen)
            lists = block_lists(mask, B, H, s, s, (128, e))
            entries, counts = packed_entries(lists, s)
            share = ((lists.partial_counts.sum() + lists.full_counts.sum()).item() * 128 * e
                     / (B * H * s * s))
            keys = float(counts.float().mean())
            shipped = ck.block_sparse_attention(*sets[0], mask, block_size=(128, e))
            _, _, short = _gather_tiling(torch.device("cuda"), 128, D, int(keys))
            # the ceiling: our dense kernel over as many contiguous keys as a list holds
            n = int(keys) // 64 * 64
            fns[f"S{s} E{e} dense {n} keys"] = lambda x, n=n: ck.attention(
                x[0], x[1][:, :, :n], x[2][:, :, :n])
            meta[f"S{s} E{e} dense {n} keys"] = (s, e, None, share * n / keys, n, 0.0)
            for i, config in enumerate(configs):
                kern, cfg = kernel_for(config, e, short)
                wave = torch.cuda.get_device_properties(0).multi_processor_count * cfg.get(
                    "ctas_per_sm", 1)
                tiles = B * H * -(-s // cfg["block_m"])
                sched = _gather_schedule(counts, s, cfg["block_m"], 128,
                                         not cfg.get("persistent"), bool(cfg.get("persistent")),
                                         wave, tiles)
                if config.get("walks") == "lpt":  # the host's greedy deal (the op's)
                    sched["mTileOrder"] = host_walks(counts, s, cfg, wave,
                                                     config.get("fixed", TILE_FIXED_BLOCKS))

                def run(x, kern=kern, entries=entries, counts=counts, sched=sched, lse=lse):
                    o = torch.empty_like(x[0])
                    kern(*params.call_args(mQ=x[0], mK=x[1], mV=x[2], mO=o, mLSE=lse,
                                           mPrevLSE=None, mColsum=None, mIndices=entries,
                                           mCounts=counts, scale=D ** -0.5, out_scale=None,
                                           **sched))
                    return o

                name = f"S{s} E{e} c{i}"
                diff = (run(sets[0]).float() - shipped.float()).abs().max().item()
                fns[name] = run
                meta[name] = (s, e, i, share, keys, diff)
        t = bench_interleaved(fns, sets, rounds=args.rounds, warmup=2)
        dense = t["dense"].median_ms
        for name, (s_, e, i, share, keys, diff) in meta.items():
            ms = t[name].median_ms
            label = f"c{i}" if i is not None else "dense"
            cfg_text = str(configs[i]) if i is not None else "keys contiguous (no list)"
            rows.append([s_, e, label, cfg_text, round(keys), ms, dense,
                         dense / ms, dense / ms * share, diff])
            records.append(dict(seq=s_, block=e, config=cfg_text, keys=keys, ms=ms,
                                dense_ms=dense, of_ideal=dense / ms * share, max_diff=diff))
    gpu = device_name()
    print(f"{gpu} | commit {commit_id()} | B{B} H{H} D{D}, {args.absent:.0%} of blocks absent\n")
    print(format_table(["S", "E", "id", "config", "keys", "ms", "dense ms", "vs dense",
                        "of ideal", "max diff"], rows))
    tag = "h200" if "H200" in gpu else "h100"
    with open(f"perf/plots/block_sparse_loaders_{tag}.json", "w") as f:
        json.dump(dict(device=gpu, commit=commit_id(), absent=args.absent, rows=records), f,
                  indent=1)


if __name__ == "__main__":
    main()
