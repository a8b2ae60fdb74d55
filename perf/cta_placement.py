"""Which SM each persistent GEMM CTA runs on, launched plainly and as a programmatic
dependent (an anomaly: unclustered 64 x 128 launches ran 20-30% faster as dependents,
perf/RESULTS.md). The epilogue is replaced by one that writes the SM id (``%smid``) into
each tile's first element, so the output is wrong by design; each launch is timed in a
back-to-back burst, then the tiles' SM ids give every CTA's SM (the first tile of CTA c is
rank c % cluster of its cluster c // cluster's first cluster tile).

    python perf/cta_placement.py [--shape 2048x2048x2048] [--tile 64x128x64] [--cluster 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ["CUTE_KERNELS_DISK_CACHE"] = "0"  # the patched builds must not meet cached ones
sys.path.insert(0, os.path.dirname(__file__))

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402
from gemm_epilogue_cost import _accumulators_only  # noqa: E402
from gemm_skinny import forced_plan, run_plan  # noqa: E402

import cute_kernels.kernels.gemm.sm90 as sm90  # noqa: E402
from cute_kernels.bench import device_name  # noqa: E402
from cute_kernels.kernels.common.tile_scheduler import grouped_tile_coord  # noqa: E402


@cute.jit
def _record_sm(self, tiled_mma, frag, epi, tm, tn, tl, subtiles=None):
    """Keep the accumulators live (or ptxas drops the WGMMAs) and let the first consumer
    thread write this SM's id into the tile's first element."""
    _accumulators_only(self, tiled_mma, frag, epi, tm, tn, tl)
    mC = epi.mC
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 128:
        sm = cute.arch.smid().to(cutlass.Float32)
        mC[(tm * self.tile[0], tn * self.tile[1], tl)] = sm.to(mC.element_type)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="2048x2048x2048")
    ap.add_argument("--tile", default="64x128x64")
    ap.add_argument("--cluster", type=int, default=1)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))
    tile = tuple(int(v) for v in args.tile.split("x"))
    sm90.GemmSm90.epilogue_tile = _record_sm
    x = (torch.randn(m, k, device="cuda") / 4).bfloat16()
    w = (torch.randn(n, k, device="cuda") / 4).bfloat16()
    out = torch.zeros(m, n, dtype=torch.bfloat16, device="cuda")
    print(device_name(), args)
    for pdl in (False, True, False, True):
        plan = forced_plan(x, w, tile=tile, cluster_m=args.cluster, cluster_k=1,
                           max_stages=8, pdl=pdl)
        run_plan(plan, x, w, out)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.calls):
            run_plan(plan, x, w, out)
        end.record()
        end.synchronize()
        tiles_n = -(-n // tile[1])
        corners = out[::tile[0], ::tile[1]].float().int().tolist()  # [m tile][n tile]
        cm = args.cluster
        tiles_m = -(-m // tile[0])
        tiles_mc = -(-tiles_m // cm)
        # CTA c: cluster c // cm (its first cluster tile in the kernel's grouped order) and
        # rank c % cm in it (tile_scheduler.grouped_tile_coord, GemmSm90._tile_coord)
        sm_of_cta = []
        for c in range(plan.ctas):
            tmc, tn_, _ = grouped_tile_coord(c // cm, tiles_mc, tiles_n, max(1, 16 // cm))
            tm_ = tmc * cm + c % cm
            sm_of_cta.append(corners[tm_][tn_] if tm_ < len(corners) else -1)
        steps = [abs(b - a) for a, b in zip(sm_of_cta, sm_of_cta[1:])]
        same_tpc = sum((a // 2) == (b // 2) for a, b in zip(sm_of_cta, sm_of_cta[1:]))
        print(f"pdl {pdl}: {start.elapsed_time(end) * 1e3 / args.calls:.1f} us a call; "
              f"CTA -> SM {sm_of_cta[:24]} ...; |step| median {statistics.median(steps)}, "
              f"consecutive CTAs on one TPC {same_tpc} of {plan.ctas - 1}; distinct SMs "
              f"{len(set(sm_of_cta))}")


if __name__ == "__main__":
    main()
