"""A small run of every column-sparse MLP kernel for compute-sanitizer (issue 16):

    compute-sanitizer --tool memcheck python perf/mlp_delta_probe.py [hopper|ampere]
    ncu --kernel-name regex:MlpDelta --launch-skip 2 python perf/mlp_delta_probe.py hopper \
        --hunyuan

``--hunyuan``: instead, two calls at HunyuanVideo's MLP (M 118,784, K = D = 3072, F 12,288,
p 0.93, random sorted lists, M-major cache) for a profiler (skip the first call's two
kernels).

``--writeback``: instead, ``scatter_add`` at that shape (M-major cache, padded source) with each
adder (bulk, red, rmw), first on the whole GPU, then on the 8 side SMs of a green-context
``SmPartition`` (what ncu should look at: ``--kernel-name regex:ScatterAdd``).

``column_sparse_mlp`` with both act_cache layouts (a partial last group, odd counts, a group
with count 0, K / D off the tiles; the Hopper mm1's two epilogue arrangements on 314 units)
and ``scatter_add`` with both dest layouts (M-major with M a multiple of 8 takes the TMA bulk
reduction on Hopper), once each, then a sync."""

from __future__ import annotations

import sys

import torch

import cute_kernels as ck
from cute_kernels.kernels.scatter_add import ADDERS
from cute_kernels.ops import column_sparse_mlp as OPS


def lists(groups: int, width: int, f: int, gen):
    idx = torch.stack([torch.randperm(f, device="cuda", generator=gen)[:width]
                       for _ in range(groups)]).to(torch.int32)
    counts = torch.randint(1, width + 1, (groups,), device="cuda", generator=gen,
                           dtype=torch.int32)
    counts[0] = 0
    counts[-1] = width
    return idx, counts


def hunyuan(path: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    m, k, f, d, group = 118_784, 3072, 12_288, 3072, 128
    count, groups = 861, -(-m // group)
    idx = torch.rand(groups, f, device="cuda", generator=gen).argsort(-1)[:, :count]
    idx = idx.sort(-1).values.to(torch.int32).contiguous()
    counts = torch.full((groups,), count, dtype=torch.int32, device="cuda")
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w1 = (torch.randn(f, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
    w2 = (torch.randn(f, d, device="cuda", generator=gen) * f ** -0.5).bfloat16().t()
    act = torch.randn(f, m, device="cuda", generator=gen).bfloat16().t()
    out = torch.randn(m, d, device="cuda", generator=gen).bfloat16()
    with ck.force_path(path):
        for _ in range(2):
            ck.column_sparse_mlp(x, w1, None, w2, idx, counts, act, out, group=group)
    torch.cuda.synchronize()
    print("hunyuan ok", path)


def main(path: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    group, width = 128, 200
    # K / D off the tiles (mma.sync kernels on both paths), then multiples of them (the
    # WGMMA kernels on Hopper)
    for m, k, f, d in ((333, 136, 520, 136), (333, 128, 520, 256)):
        x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        w1 = (torch.randn(f, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
        b1 = torch.randn(f, device="cuda", generator=gen).bfloat16()
        w2 = (torch.randn(d, f, device="cuda", generator=gen) * f ** -0.5).bfloat16()
        idx, counts = lists(-(-m // group), width, f, gen)
        with ck.force_path(path):
            for m_major in (True, False):
                act = torch.randn(m, f, device="cuda", generator=gen).bfloat16()
                if m_major:
                    act = act.t().contiguous().t()
                out = torch.randn(m, d, device="cuda", generator=gen).bfloat16()
                ck.column_sparse_mlp(x, w1, b1, w2, idx, counts, act, out, group=group)
        # the gated form (SwiGLU on interleaved (up, gate) rows)
        w1g = (torch.randn(2 * f, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
        with ck.force_path(path):
            ck.column_sparse_mlp(x, w1g, None, w2, idx, counts, act, out, group=group,
                                 activation="swiglu")
    # the WGMMA mm1 in both epilogue arrangements (consumers, or an epilogue warpgroup taking
    # each tile over) on more work units than SMs, plain and gated
    m, k, f, d = 20_000, 128, 520, 256
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w2 = (torch.randn(d, f, device="cuda", generator=gen) * f ** -0.5).bfloat16()
    idx, counts = lists(-(-m // group), width, f, gen)
    act = torch.randn(f, m, device="cuda", generator=gen).bfloat16().t()
    out = torch.randn(m, d, device="cuda", generator=gen).bfloat16()
    default = OPS.SM90_UP_EPILOGUE_WG
    with ck.force_path(path):
        for epilogue_wg in (False, True):
            OPS.SM90_UP_EPILOGUE_WG = epilogue_wg
            for rows, activation in ((1, "gelu_tanh"), (2, "swiglu")):
                w1 = (torch.randn(rows * f, k, device="cuda", generator=gen) * k ** -0.5)
                ck.column_sparse_mlp(x, w1.bfloat16(), None, w2, idx, counts, act, out,
                                     group=group, activation=activation)
    OPS.SM90_UP_EPILOGUE_WG = default
    m, f = 333, 520
    with ck.force_path(path):
        for rows, m_major in ((336, True), (333, False)):
            gi, gc = lists(-(-rows // group), width, f, gen)
            src = torch.randn(rows, width, device="cuda", generator=gen).bfloat16()
            dest = torch.randn(rows, f, device="cuda", generator=gen).bfloat16()
            if m_major:
                dest = dest.t().contiguous().t()
            ck.scatter_add(src, dest, gi, gc, group=group)
            ck.scatter_add(src, dest, gi, gc, group=group, num_sms=2)
            padded = torch.randn(rows, -(-width // 8) * 8 + 8, device="cuda", generator=gen)
            for adder in ADDERS:  # the M-major dest takes each adder of the bulk path
                OPS.SCATTER_ADDER = adder
                ck.scatter_add(padded.bfloat16()[:, :width], dest, gi, gc, group=group,
                               num_sms=2)
            OPS.SCATTER_ADDER = None
            # an M-major source: bulk copies in (one CTA per tile, then two CTAs walking)
            src_m = src.t().contiguous().t()
            ck.scatter_add(src_m, dest, gi, gc, group=group)
            ck.scatter_add(src_m, dest, gi, gc, group=group, num_sms=2)
    torch.cuda.synchronize()
    print("probe ok", path)


def writeback(path: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    m, f, group, count = 118_784, 12_288, 128, 861
    groups = -(-m // group)
    idx = torch.rand(groups, f, device="cuda", generator=gen).argsort(-1)[:, :count]
    idx = idx.sort(-1).values.to(torch.int32).contiguous()
    counts = torch.full((groups,), count, dtype=torch.int32, device="cuda")
    src = torch.randn(m, -(-count // 8) * 8, device="cuda", generator=gen).bfloat16()[:, :count]
    dest = torch.randn(f, m, device="cuda", generator=gen).bfloat16().t()
    part = ck.SmPartition(8, mode="green")
    with ck.force_path(path):
        for adder in ADDERS:
            OPS.SCATTER_ADDER = adder
            ck.scatter_add(src, dest, idx, counts, group=group)
            part.run(lambda: None, lambda: ck.scatter_add(src, dest, idx, counts, group=group))
    OPS.SCATTER_ADDER = None
    torch.cuda.synchronize()
    print("writeback ok", path, part)


if __name__ == "__main__":
    mode = hunyuan if "--hunyuan" in sys.argv else writeback if "--writeback" in sys.argv else main
    mode(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "hopper")
