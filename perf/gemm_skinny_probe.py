"""A few skinny GEMM launches for compute-sanitizer (memcheck, racecheck): the default swap-AB
/ split-K schedules on decode shapes and forced ones on residue shapes (split-K through the
workspace and in a cluster; 2-D clusters; 192- and 256-row and 224- and 240-wide tiles;
pingpong consumers; stream-K, swapped too) and the gated GEMM's decode tiles, each checked
against an fp32 reference.

    compute-sanitizer --tool memcheck python perf/gemm_skinny_probe.py
"""

from __future__ import annotations

import sys

import torch

import cute_kernels as ck

sys.path.insert(0, "perf")
from gemm_skinny import forced_plan, run_plan  # noqa: E402


def check(out, x, w, bias=None, what=""):
    ref = x.float() @ w.float().t() + (bias.float() if bias is not None else 0)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert err < 2e-2, f"{what}: rel err {err:.3g}"
    print(f"{what}: rel err {err:.2e}")


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, device="cuda", generator=gen) / 4).bfloat16()

    # then: split-K in clusters of two (48 tiles of 128x128, K 2048), by default; the last
    # two: short one-wave launches in 2x1 clusters, programmatic dependents by default (64 x
    # 128 and 128 x 128 tiles; M, N and K residues)
    for m, n, k in ((1, 4096, 14336), (13, 2048, 4096), (128, 1024, 8192), (48, 1000, 512),
                    (768, 1024, 2048), (1000, 1000, 1000), (1000, 2040, 1000)):
        x, w, b = rand(m, k), rand(n, k), rand(n)
        check(ck.linear(x, w, b), x, w, b, f"default {m}x{n}x{k}")
    for m, n, k, fields in ((7, 1000, 264, dict(splits=3)),
                            (29, 776, 1000, dict(splits=5, tile=(128, 32, 64))),
                            (1, 520, 136, dict(splits=1)),
                            # split-K in a cluster: one tile per cluster, then 2 clusters
                            # walking 42 tiles (the receive buffer handed back between them)
                            (333, 776, 1000, dict(tile=(128, 128, 64), cluster_m=1,
                                                  cluster_k=2)),
                            (700, 896, 2048, dict(tile=(128, 64, 64), cluster_m=1,
                                                  cluster_k=2, ctas=4)),
                            # clusters along N (A multicast) and 2x2, CTAs past M / N, one
                            # cluster walking many tiles
                            (1000, 520, 1000, dict(tile=(128, 64, 64), cluster_m=1,
                                                   cluster_n=2, cluster_k=1)),
                            (333, 776, 264, dict(tile=(64, 128, 64), cluster_m=2,
                                                 cluster_n=2, cluster_k=1, ctas=4)),
                            # three consumer warpgroups (192-row tiles), a CTA past M, 8
                            # clusters walking 21 cluster tiles; a 240-wide tile in 16-wide
                            # subtiles
                            (800, 1000, 1000, dict(tile=(192, 160, 64), cluster_m=2,
                                                    cluster_k=1, ctas=16)),
                            (333, 1000, 264, dict(tile=(128, 240, 64), cluster_m=2,
                                                  cluster_k=1)),
                            # 224-wide tiles: 7 subtiles in a C ring of 6 (the seventh
                            # reuses the first's buffer), 8 CTAs walking 24 tiles
                            (700, 1344, 136, dict(tile=(128, 224, 64), cluster_m=2,
                                                  cluster_k=1, ctas=8)),
                            # 256-row tiles (two consumers of two WGMMA rows each): 2x1
                            # clusters with a CTA past M and 4 clusters walking 10 cluster
                            # tiles; 1x2 clusters sharing A
                            (700, 776, 1000, dict(tile=(256, 160, 64), cluster_m=2,
                                                   cluster_k=1, ctas=8)),
                            (333, 520, 264, dict(tile=(256, 128, 64), cluster_m=1,
                                                 cluster_n=2, cluster_k=1)),
                            # pingpong consumers (a tile per consumer warpgroup, each its
                            # own C ring): 8 CTAs walking 48 tiles of 128 x 176 in 2x1
                            # clusters; 18 tiles of 64 x 256 on 8 unclustered CTAs (in two
                            # of them warpgroup 0 runs a tile more than warpgroup 1)
                            (1000, 1000, 264, dict(tile=(128, 176, 64), cluster_m=2,
                                                   cluster_k=1, ctas=8, pingpong=True)),
                            (333, 520, 136, dict(tile=(64, 256, 64), cluster_m=1,
                                                 cluster_k=1, ctas=8, pingpong=True)),
                            # stream-K: 8 of 20 cluster tiles shared by k-ranges (partials
                            # through the workspace), 64-row tiles with ranges of 4 k-tiles
                            (1000, 1104, 1000, dict(tile=(128, 256, 64), cluster_m=2,
                                                    cluster_k=1, ctas=12, stream_k=True)),
                            (200, 520, 136, dict(tile=(64, 128, 64), cluster_m=2,
                                                 cluster_k=1, ctas=6, stream_k=True)),
                            # every tile shared by 2-3 clusters (middle parts)
                            (200, 520, 1000, dict(tile=(64, 128, 64), cluster_m=2,
                                                  cluster_k=1, ctas=42, stream_k=True)),
                            # swap-AB with stream-K: 16 swapped tiles on 64 CTAs, K residue
                            (7, 1000, 4104, dict(swap=True, splits=1, tile=(64, 16, 128),
                                                 max_stages=8, ctas=64, stream_k=True))):
        x, w = rand(m, k), rand(n, k)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        check(run_plan(forced_plan(x, w, **fields), x, w, out), x, w, None,
              f"forced {fields} {m}x{n}x{k}")
    # the gated GEMM's decode tiles (64 x 128, 128 deep; 8 / 32 / 64 rows of A loaded):
    # residue I and K
    for m, inter, k in ((7, 520, 264), (64, 1032, 1000), (1, 264, 136), (17, 264, 1000)):
        x = rand(m, k)
        w = ck.pack_gated_weight(rand(inter, k), rand(inter, k))
        out = ck.gated_mlp_up(x, w)
        ref = ck.reference.gated_mlp_up(x, w)
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        assert err < 2e-2, f"gated {m}x{inter}x{k}: rel err {err:.3g}"
        print(f"gated {m}x{inter}x{k}: rel err {err:.2e}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
