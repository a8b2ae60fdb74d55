"""Does keeping part of the gathered weight in a persisting L2 window speed up the column-sparse
MLP's GEMMs (issue 16)? A one-off probe:

    python perf/l2_persist_probe.py [--rounds 7]

HunyuanVideo's MLP at p 0.93 (random sorted lists, M-major act_cache), as
perf/mlp_delta_tuning.py. mm1 (gathering W1's rows) and mm2 (gathering W2^T's rows) are timed
each on its own (persisting lines outlive a launch, so nothing is interleaved across ways):
plain; with a CUDA access-policy window over its gathered weight on the launch stream
(``CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW``, hit ratio = the L2 set-aside / the weight's
bytes, so that share of its lines persists) at half and all of the largest set-aside; plain
again after ``cuCtxResetPersistingL2Cache`` with no set-aside (the spread between the two plain
rows is the run's noise). Prints ms per way and the ratio to the first plain row.
"""

from __future__ import annotations

import argparse
import math

import torch
from cuda.bindings import driver as cu

from cute_kernels.bench import bench_interleaved, format_table
from cute_kernels.ops import column_sparse_mlp as mlp


def call(fn, *args):
    err, *rest = fn(*args)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{fn.__name__}: {err}")
    return rest[0] if len(rest) == 1 else rest


def set_window(stream: torch.cuda.Stream, tensor: torch.Tensor | None, ratio: float) -> None:
    """The stream's access-policy window over ``tensor`` (None: an empty window)."""
    value = cu.CUstreamAttrValue()
    window = value.accessPolicyWindow
    window.base_ptr = tensor.data_ptr() if tensor is not None else 0
    window.num_bytes = tensor.numel() * tensor.element_size() if tensor is not None else 0
    window.hitRatio = ratio
    window.hitProp = cu.CUaccessProperty.CU_ACCESS_PROPERTY_PERSISTING
    window.missProp = cu.CUaccessProperty.CU_ACCESS_PROPERTY_NORMAL
    call(cu.cuStreamSetAttribute, cu.CUstream(stream.cuda_stream),
         cu.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, value)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    m, k, f, d, group, p = 118_784, 3072, 12_288, 3072, 128, 0.93
    gen = torch.Generator(device="cuda").manual_seed(0)
    count = math.ceil((1 - p) * f)
    groups = -(-m // group)
    idx = torch.rand(groups, f, device="cuda", generator=gen).argsort(-1)[:, :count]
    idx = idx.sort(-1).values.to(torch.int32).contiguous()
    counts = torch.full((groups,), count, dtype=torch.int32, device="cuda")
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w1 = (torch.randn(f, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
    b1 = torch.randn(f, device="cuda", generator=gen).bfloat16()
    w2t = (torch.randn(f, d, device="cuda", generator=gen) * f ** -0.5).bfloat16()
    act = torch.randn(f, m, device="cuda", generator=gen).bfloat16().t()
    out = torch.randn(m, d, device="cuda", generator=gen).bfloat16()
    padded = -(-count // mlp.TILE_N) * mlp.TILE_N
    delta = torch.zeros(m, padded, dtype=torch.bfloat16, device="cuda")
    dev = x.device
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # the op's default Hopper kernels
    key_up = mlp.up_sm90_key(torch.bfloat16, "gelu_tanh", True, True)

    def mm1():
        mlp._launch("up_sm90", dev, key_up, mX=x.unsqueeze(-1), mW1=w1, mB1=b1, mIdx=idx,
                    mCounts=counts, mAct=act, mDelta=delta,
                    num_ctas=min(groups * -(-count // mlp.TILE_N), sms))

    def mm2():
        mlp._launch("down_sm90", dev, mlp.down_sm90_key(torch.bfloat16),
                    mDelta=delta.unsqueeze(-1), mW2t=w2t, mIdx=idx, mCounts=counts, mOut=out,
                    num_ctas=min(groups * (d // 128), sms))

    mm1()
    torch.cuda.synchronize()
    cu_dev = call(cu.cuDeviceGet, 0)
    max_set_aside = call(cu.cuDeviceGetAttribute, cu.CUdevice_attribute
                         .CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, cu_dev)
    max_window = call(cu.cuDeviceGetAttribute, cu.CUdevice_attribute
                      .CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, cu_dev)
    print(f"L2 set-aside max {max_set_aside / 2**20:.1f} MiB, window max "
          f"{max_window / 2**20:.0f} MiB")
    main_stream = torch.cuda.current_stream()
    side = torch.cuda.Stream()

    def on_side(fn):
        def run(_):
            side.wait_stream(main_stream)
            with torch.cuda.stream(side):
                fn()
            main_stream.wait_stream(side)
        return run

    def plain():
        call(cu.cuCtxResetPersistingL2Cache)
        call(cu.cuCtxSetLimit, cu.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
        set_window(side, None, 0.0)

    def timed(fn) -> float:
        t = bench_interleaved({"k": on_side(fn)}, [None], rounds=args.rounds, warmup=2)
        return t["k"].median_ms

    rows = []
    # each kernel on its own: persisting lines of one weight would evict the other's
    for name, fn, weight in (("mm1", mm1, w1), ("mm2", mm2, w2t)):
        plain()
        base = timed(fn)
        rows.append([name, "plain", base, 1.0])
        for share in (0.5, 1.0):
            set_aside = int(max_set_aside * share)
            call(cu.cuCtxResetPersistingL2Cache)
            call(cu.cuCtxSetLimit, cu.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, set_aside)
            # hit ratio = set-aside / the weight's bytes: that share of its lines persists
            set_window(side, weight, min(1.0, set_aside / (weight.numel() * 2)))
            ms = timed(fn)
            rows.append([name, f"window, set-aside {set_aside / 2**20:.0f} MiB", ms, ms / base])
        plain()
        ms = timed(fn)
        rows.append([name, "plain again", ms, ms / base])
    print(format_table(["kernel", "way", "ms", "x plain"], rows))

if __name__ == "__main__":
    main()
