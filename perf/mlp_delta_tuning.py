"""The column-sparse MLP delta's two kernels timed separately, per configuration (issue 16):

    python perf/mlp_delta_tuning.py [--m M] [--p 0.93] [--rows-major] [--activation swiglu]
                                    [--no-down | --no-up] [--up-stages 5,6]

HunyuanVideo's MLP (K = D = 3072, F = 12,288, bf16, GELU-tanh, group 128), M tokens (default
118,784), count = ceil((1 - p) F) random sorted columns per group, M-major act_cache; with a
gated ``--activation`` W1 / b1 are (2F, K) / (2F,) interleaved (up, gate) rows. Times
mm1 (``MlpDeltaUp``) over ``UP_CONFIGS`` and mm2 (``MlpDeltaDown``) over ``DOWN_CONFIGS``
through the op's own launcher, next to torch.mm of the same dense sizes (the padded list as
N or K), interleaved (cute_kernels/bench.py). TFLOP/s count the listed columns only. Picks
``ops.column_sparse_mlp.UP_CONFIG`` / ``DOWN_CONFIG``.
"""

from __future__ import annotations

import argparse
import math

import torch

from cute_kernels.bench import bench_interleaved, format_table
from cute_kernels.ops import column_sparse_mlp as mlp

UP_CONFIGS = [dict(tile_k=32, stages=4, cache_batch=64, warps=(2, 2)),
              dict(tile_k=32, stages=4, cache_batch=64, warps=(2, 4)),
              dict(tile_k=64, stages=3, cache_batch=64, warps=(2, 4)),
              dict(tile_k=32, stages=5, cache_batch=64, warps=(2, 4)),
              dict(tile_k=32, stages=4, cache_batch=32, warps=(4, 2))]
DOWN_CONFIGS = [dict(tile_n=64, tile_k=64, stages=3, warps=(2, 2)),
                dict(tile_n=64, tile_k=64, stages=3, warps=(4, 2)),
                dict(tile_n=128, tile_k=64, stages=3, warps=(2, 4)),
                dict(tile_n=128, tile_k=32, stages=4, warps=(2, 4)),
                dict(tile_n=64, tile_k=64, stages=4, warps=(4, 2))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=118_784)
    ap.add_argument("--p", type=float, default=0.93)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--row-major", action="store_true", help="row-major act_cache")
    ap.add_argument("--activation", default="gelu_tanh",
                    choices=mlp.MLP_ACTIVATIONS + tuple(mlp.MLP_GATED))
    ap.add_argument("--no-down", action="store_true", help="time mm1's kernels only")
    ap.add_argument("--up-stages", default="",
                    help="only the default Hopper mm1 (16-bit tile, epilogue warpgroup) at "
                    "these stage counts, e.g. 5,6 (no mma.sync configurations)")
    ap.add_argument("--no-up", action="store_true",
                    help="time mm2's kernels (and the first mm1 configuration, which makes "
                         "their delta)")
    args = ap.parse_args()
    act_name = args.activation
    w1_rows = 2 if act_name in mlp.MLP_GATED else 1  # W1 rows per feature
    k = d = 3072
    f, group = 12_288, 128
    m = args.m
    gen = torch.Generator(device="cuda").manual_seed(0)
    count = math.ceil((1 - args.p) * f)
    groups = -(-m // group)
    idx = torch.rand(groups, f, device="cuda", generator=gen).argsort(-1)[:, :count]
    idx = idx.sort(-1).values.to(torch.int32).contiguous()
    counts = torch.full((groups,), count, dtype=torch.int32, device="cuda")
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w1 = (torch.randn(w1_rows * f, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
    b1 = torch.randn(w1_rows * f, device="cuda", generator=gen).bfloat16()
    w2t = (torch.randn(f, d, device="cuda", generator=gen) * f ** -0.5).bfloat16()
    act = torch.randn(m, f, device="cuda", generator=gen).bfloat16()
    m_major = not args.row_major
    if m_major:
        act = act.t().contiguous().t()
    out = torch.randn(m, d, device="cuda", generator=gen).bfloat16()
    padded = -(-count // mlp.TILE_N) * mlp.TILE_N
    delta = torch.zeros(m, padded, dtype=torch.bfloat16, device="cuda")
    dev = x.device
    fns = {}
    up_stages = [int(v) for v in args.up_stages.split(",") if v]
    for c in UP_CONFIGS if not up_stages else []:
        key = (torch.bfloat16, act_name, True, group, 128, m_major, tuple(sorted(c.items())))
        fns["up " + " ".join(f"{a}={b}" for a, b in c.items()).replace(" ", "")
            .replace("=", ":").replace(",", " ", 3)] = (
            lambda _, key=key: mlp._launch("up", dev, key, mX=x, mW1=w1, mB1=b1, mIdx=idx,
                                           mCounts=counts, mAct=act, mDelta=delta))
    for c in DOWN_CONFIGS:
        key = (torch.bfloat16, group, 128, tuple(sorted(c.items())))
        fns["down " + " ".join(f"{a}={b}" for a, b in c.items()).replace(" ", "")
            .replace("=", ":").replace(",", " ", 3)] = (
            lambda _, key=key: mlp._launch("down", dev, key, mDelta=delta, mW2t=w2t, mIdx=idx,
                                           mCounts=counts, mOut=out))
    if torch.cuda.get_device_capability() == (9, 0):  # the WGMMA kernels
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        ctas = min(groups * max(padded // mlp.TILE_N, d // 128), sms)
        up_ctas = min(groups * -(-count // (mlp.TILE_N // w1_rows)), sms)
        # the ring holds each row's index or its address; the consumers run the cache pass
        # or hand it to an epilogue warpgroup
        # and the epilogue tile staged as fp32 (4 stages) or 16-bit (4 or 5 stages)
        up_variants = ([(True, True, True, n) for n in up_stages] if up_stages else
                       [(False, False, False, 4), (True, False, False, 4), (True, True, False, 4),
                        (True, True, True, 4), (True, True, True, 5)])
        for addresses, epi, narrow, stages in up_variants:
            name = ("up sm90 (WGMMA, gather producer)" + ", staged addresses" * addresses
                    + ", epilogue warpgroup" * epi + f", 16-bit tile, {stages} stages" * narrow)
            fns[name] = (
                lambda _, key=(torch.bfloat16, act_name, True, m_major, addresses, epi, narrow,
                               stages): (
                    mlp._launch("up_sm90", dev, key, mX=x.unsqueeze(-1), mW1=w1, mB1=b1,
                                mIdx=idx, mCounts=counts, mAct=act, mDelta=delta,
                                num_ctas=up_ctas)))
        # the list staged per k-tile (one ahead) or in chunks; the tile fp32 or 16-bit
        for chunk, narrow, stages in ((0, False, 4), (16, False, 4), (16, True, 4),
                                      (16, True, 5)):
            name = (f"down sm90 (WGMMA, gather producer), list chunk {chunk}"
                    + f", 16-bit tile, {stages} stages" * narrow)
            fns[name] = (
                lambda _, key=(torch.bfloat16, chunk, narrow, stages): mlp._launch(
                    "down_sm90", dev, key, mDelta=delta.unsqueeze(-1), mW2t=w2t, mIdx=idx,
                    mCounts=counts, mOut=out, num_ctas=ctas))
    if args.no_down:
        fns = {name: fn for name, fn in fns.items() if not name.startswith("down")}
    if args.no_up:
        ups = [name for name in fns if name.startswith("up")]
        fns = {name: fn for name, fn in fns.items() if name not in ups[1:]}
    xp = torch.randn(m, padded, device="cuda", generator=gen).bfloat16()
    # the dense mm1 of the same padded width: both rows of each feature when gated
    wp = torch.randn(w1_rows * padded, k, device="cuda", generator=gen).bfloat16()
    fns[f"torch.mm mm1-sized (M,K)x(K,{'2 ' * (w1_rows > 1)}Lpad)"] = lambda _: torch.mm(x, wp.t())
    fns["torch.mm mm2-sized (M,Lpad)x(Lpad,D)"] = lambda _: torch.mm(xp, w2t[:padded])
    # every configuration computes the same thing: one call each from the same caches,
    # compared with the first configuration's result (then the timed calls may drift them)
    act0, out0 = act.clone(), out.clone()
    first = {}
    for name, fn in fns.items():
        if name.startswith("torch"):
            continue
        kind = name.split()[0]  # "up" / "down": each compared with the first of its kind
        act.copy_(act0)
        out.copy_(out0)
        if kind == "down":
            delta.copy_(first["up"][0])
        fn(None)
        got = (delta.clone(), act.clone()) if kind == "up" else (out.clone(),)
        if kind not in first:
            first[kind] = got
        else:
            err = max(((a.float() - b.float()).norm() / b.float().norm()).item()
                      for a, b in zip(got, first[kind]))
            print(f"{name}: rel. difference to the first {kind} config {err:.1e}")
            if not err < 1e-2:
                raise SystemExit(f"{name} disagrees with the first {kind} configuration")
    for fn in fns.values():  # compile outside the timing
        fn(None)
    torch.cuda.synchronize()
    t = bench_interleaved(fns, [None], rounds=args.rounds, warmup=2)
    flops = {"up": 2 * m * count * k * w1_rows, "down": 2 * m * count * d}
    kind = {name: "down" if name.startswith("down") or "mm2" in name else "up" for name in fns}
    rows = [(name, f"{t[name].median_ms:.3f}",
             f"{flops[kind[name]] / t[name].median_ms / 1e9:.0f}") for name in fns]
    print(f"M {m}, p {args.p}, count {count}, {act_name}, "
          f"{'M-major' if m_major else 'row-major'} act_cache; TFLOP/s over the listed columns "
          f"(gated mm1: both rows of each)")
    print(format_table(["kernel / config", "ms", "TFLOP/s"], rows))


if __name__ == "__main__":
    main()
