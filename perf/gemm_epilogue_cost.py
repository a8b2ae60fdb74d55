"""Where a Hopper GEMM tile's epilogue time goes: the op's plan against the same plan built
from a patched ``GemmSm90`` (one process, interleaved with cuBLAS, inputs rotated past L2).

    python perf/gemm_epilogue_cost.py [--shapes 3000x5000x3072,...] [--variants base,...]
        [--plan "dict(tile=(256, 160, 64), cluster_m=1, cluster_n=2)"] [--out DIR]
        [--power SECONDS]

``--power``: afterwards each contender also runs back to back for SECONDS while
``nvidia-smi`` is polled (``perf/gpu_power.py``): µs per call, SM clock and board power, to
tell a kernel that takes more cycles from one that draws more power and is clocked down.

Variants (``*``: the output is wrong by design, timing only):
  base       the plan as ``linear`` would run it (forced: no drift limiter, no stream-K)
  noepi*     no epilogue: the accumulators are summed and stored only if the sum is an
             impossible value (kept live, or ptxas drops the WGMMAs and the time with them)
  nostore*   the epilogue without its TMA stores (stmatrix, fences, barriers all kept)
  e2         the C ring held at 2 subtiles (``epi_stages=2``; by default it grows into the smem
             the stages leave)
  before     the ``GemmSm90`` of the file ``BEFORE_SM90`` names (an older sm90.py; put it at
             cute_kernels/kernels/gemm/_sm90_before.py, an untracked file travels with a
             device call)
  n16, n32, n64  16- / 32- / 64-wide subtiles (``epi_n``)
  half, full tile N / 2 in a 2-deep ring; the whole tile in one buffer
  direct     no smem: 4-byte global stores straight from the accumulators, per column pair
  evict      the TMA stores with an L2 evict-first policy
  keepab     the A / B TMA loads with an L2 evict-last policy (the panels other CTAs reread)
  keepa      only A's (unicast in a 2x1 cluster) evict-last; ``keepa-firstb``: and B's
             (multicast) evict-first
  stg        no TMA store: each subtile goes through the smem ring as usual and the consumer
             threads copy it out with coalesced 16-byte st.global (is it the TMA unit?)
  g4, g8, g32  the tile order's group of tile rows (``group_m``, 16 by default): how long the
             A / B panels a wave reads stay in L2 beside the C lines the stores bring in
  pdl        a programmatic dependent launch (``GemmSm90(pdl=True)``) whatever the schedule
  spin       every mbarrier wait (the pipelines' and the kernel's own) a loop on
             ``mbarrier.test_wait``: no suspend, no NANOSLEEP (the DSL's wait passes a 10 ms
             suspend-time hint to ``try_wait``); ``trywait``: ``try_wait`` without the hint

``--graphs``: each contender also in CUDA graphs (``bench.graph_ms``; GPU time, no host cost),
measured twice in alternating order.
"""

from __future__ import annotations

import argparse
import os
import sys
import types

os.environ["CUTE_KERNELS_DISK_CACHE"] = "0"  # patched builds must not meet cached ones
sys.path.insert(0, os.path.dirname(__file__))

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402
from cutlass import Int32, Int64  # noqa: E402
from cutlass._mlir.dialects import llvm  # noqa: E402
from cutlass.cute.nvgpu import cpasync  # noqa: E402
from cutlass.cutlass_dsl import T, dsl_user_op  # noqa: E402
from gemm_skinny import forced_plan, run_plan  # noqa: E402
from gemm_tuning import parse_configs  # noqa: E402
from gpu_power import sustained  # noqa: E402

import cute_kernels.kernels.gemm.sm90 as sm90  # noqa: E402
import cute_kernels.runtime.bridge as bridge  # noqa: E402
from cute_kernels.bench import (  # noqa: E402
    bench_interleaved,
    commit_id,
    device_name,
    format_table,
    graph_ms,
    input_sets_needed,
    save_results,
)
from cute_kernels.runtime.compile import KERNELS  # noqa: E402

GemmSm90 = sm90.GemmSm90
ORIGINAL = (GemmSm90.__init__, GemmSm90.epilogue_tile, sm90.cute, cute.arch.mbarrier_wait)


def _asm_wait(instruction: str):
    """An mbarrier wait as one PTX loop on ``instruction`` (``test_wait``: pure polling;
    ``try_wait`` without a suspend-time hint: CUTLASS C++'s ``ClusterBarrier::wait``)."""
    @dsl_user_op
    def wait(mbar_ptr, phase, *, loc=None, ip=None) -> None:
        llvm.inline_asm(
            None, [Int32(mbar_ptr.toint(loc=loc, ip=ip)).ir_value(loc=loc, ip=ip),
                   Int32(phase).ir_value(loc=loc, ip=ip)],
            "{\n.reg .pred p;\nLAB_WAIT:\n"
            f"mbarrier.{instruction}.parity.shared::cta.b64 p, [$0], $1;\n"
            "@p bra DONE;\nbra LAB_WAIT;\nDONE:\n}", "r,r", has_side_effects=True,
            is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)
    return wait


@cute.jit
def _accumulators_only(self, tiled_mma, frag, epi, tm, tn, tl, subtiles=None):
    acc, mC = frag.acc, epi.mC
    total = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(cute.size(acc)):
        total = total + acc[i]
    if total == cutlass.Float32(-1.2345e-30):
        mC[(0, 0, 0)] = total.to(mC.element_type)


@cute.jit
def _direct_stores(self, tiled_mma, frag, epi, tm, tn, tl, subtiles=None):
    bm, bn, _ = self.tile
    acc, mC = frag.acc, epi.mC
    gC = cute.local_tile(mC[None, None, tl], (bm, bn), (tm, tn))
    cC = cute.local_tile(epi.cC, (bm, bn), (tm, tn))
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mC.element_type,
                               num_bits_per_copy=32)
    r2g = cute.make_tiled_copy_C(atom, tiled_mma)
    thr = r2g.get_slice(epi.ctid)
    tRgC, tRcC = thr.partition_D(gC), thr.partition_D(cC)
    rC = cute.make_rmem_tensor_like(acc, mC.element_type)
    rC.store(acc.load().to(mC.element_type))
    tRrC = r2g.retile(rC)
    for i in cutlass.range_constexpr(cute.size(tRrC, mode=[1])):
        for j in cutlass.range_constexpr(cute.size(tRrC, mode=[2])):
            for k in cutlass.range_constexpr(cute.size(tRrC, mode=[0]) // 2):
                c = tRcC[(0, k), i, j]
                if c[0] < mC.shape[0] and c[1] < mC.shape[1]:
                    cute.autovec_copy(tRrC[(None, k), i, j], tRgC[(None, k), i, j])


@cute.jit
def _smem_staged_stores(self, tiled_mma, frag, epi, tm, tn, tl, subtiles=None):
    bm, bn, _ = self.tile
    acc, mC, sC, ctid = frag.acc, epi.mC, epi.sC, epi.ctid
    tRS_rAcc, tRS_rSub, tRS_rOut = epi.tRS_rAcc, epi.tRS_rSub, epi.tRS_rOut
    if cutlass.const_expr(not self.epilogue.is_identity):
        tCcC = frag.thr_mma.partition_C(cute.local_tile(epi.cC, (bm, bn), (tm, tn)))
        self.epilogue.visit(acc, tCcC, mC.shape[self.epilogue.bias_dim], epi.mBias)
    gC_tile = cute.local_tile(mC[None, None, tl], (bm, bn), (tm, tn))
    cC_tile = cute.local_tile(epi.cC, (bm, bn), (tm, tn))
    threads = 128 * self.consumer_wgs
    vec = 128 // mC.element_type.width
    cols = self.epi_tile[1] // vec
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mC.element_type,
                               num_bits_per_copy=128)
    s2g = cute.make_tiled_copy_tv(atom, cute.make_layout((threads // cols, cols), stride=(cols, 1)),
                                  cute.make_layout((1, vec)))
    thr = s2g.get_slice(ctid)
    chunks = cute.size(tRS_rSub, mode=[2])
    for sub in cutlass.range_constexpr(epi.n_sub):
        buf = sub % self.c_ring
        for m in cutlass.range_constexpr(cute.size(tRS_rSub, mode=[1])):
            for c in cutlass.range_constexpr(chunks):
                for v in cutlass.range_constexpr(cute.size(tRS_rSub, mode=[0])):
                    tRS_rSub[v, m, c] = tRS_rAcc[(v, sub * chunks + c), m, 0]
        tRS_rOut.store(tRS_rSub.load().to(mC.element_type))
        cute.copy(epi.r2s, tRS_rOut, epi.tRS_sC[(None, None, None, buf)])
        cute.arch.barrier(barrier_id=sm90.Barrier.EPILOGUE, number_of_threads=threads)
        tSsC = thr.partition_S(sC[(None, None, buf)])
        tSgC = thr.partition_D(cute.local_tile(gC_tile, self.epi_tile, (0, sub)))
        tScC = thr.partition_D(cute.local_tile(cC_tile, self.epi_tile, (0, sub)))
        rC = cute.make_rmem_tensor_like(tSsC)
        cute.autovec_copy(tSsC, rC)
        for i in cutlass.range_constexpr(cute.size(tSgC, mode=[1])):
            for j in cutlass.range_constexpr(cute.size(tSgC, mode=[2])):
                c = tScC[(0, 0), i, j]
                if c[0] < mC.shape[0] and c[1] < mC.shape[1]:
                    cute.copy(atom, rC[None, i, j], tSgC[None, i, j])
    cute.arch.barrier(barrier_id=sm90.Barrier.EPILOGUE, number_of_threads=threads)


def _l2_policy(priority: str):
    @dsl_user_op
    def policy(*, loc=None, ip=None) -> Int64:
        return Int64(llvm.inline_asm(
            T.i64(), [], f"createpolicy.fractional.L2::{priority}.b64 $0, 1.0;", "=l",
            has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc, ip=ip))
    return policy


_evict_first_policy, _evict_last_policy = _l2_policy("evict_first"), _l2_policy("evict_last")
TMA_LOADS = (cpasync.CopyBulkTensorTileG2SOp, cpasync.CopyBulkTensorTileG2SMulticastOp)


def _with_tma_copy(change, ops=(cpasync.CopyBulkTensorTileS2GOp,)):
    """sm90's ``cute`` with ``copy`` passing the TMA copies of ``ops`` (the stores by default)
    through ``change(kwargs)`` (None: the copy is dropped)."""
    real = ORIGINAL[2]

    def copy(atom, *args, **kwargs):
        if isinstance(atom.op, ops):
            kwargs = change(kwargs)
            if kwargs is None:
                return None
        return real.copy(atom, *args, **kwargs)
    proxy = types.ModuleType("cute_patched_tma")
    proxy.__dict__.update(vars(real))
    proxy.copy = copy
    sm90.cute = proxy


def _with_policies(policy_of, ops=TMA_LOADS):
    """The TMA copies of ``ops`` under the L2 policy ``policy_of(kwargs)`` returns (a
    ``_l2_policy``)."""
    _with_tma_copy(lambda kw: {**kw, "cache_policy": policy_of(kw)()}, ops)


def _init_with(**fields):
    """``GemmSm90`` built with ``fields`` replaced (a callable value: of the tile)."""
    def init(self, *args, **kwargs):
        over = {k: v(kwargs["tile"]) if callable(v) else v for k, v in fields.items()}
        ORIGINAL[0](self, *args, **{**kwargs, **over})
    GemmSm90.__init__ = init


def _before():
    """``sm90.GemmSm90`` (which the op's builds import at build time) from an older file."""
    import importlib.util

    path = os.environ.get("BEFORE_SM90", "cute_kernels/kernels/gemm/_sm90_before.py")
    spec = importlib.util.spec_from_file_location("cute_kernels.kernels.gemm._sm90_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sm90.GemmSm90 = module.GemmSm90


VARIANTS = {
    "base": lambda: None,
    "noepi*": lambda: setattr(GemmSm90, "epilogue_tile", _accumulators_only),
    "nostore*": lambda: _with_tma_copy(lambda kw: None),
    "e2": lambda: _init_with(epi_stages=2),
    "before": _before,
    "n32": lambda: _init_with(epi_n=32),
    "n64": lambda: _init_with(epi_n=64),
    "n16": lambda: _init_with(epi_n=16),
    "half": lambda: _init_with(epi_n=lambda tile: tile[1] // 2),
    "full": lambda: _init_with(epi_n=lambda tile: tile[1], epi_stages=1),
    "direct": lambda: setattr(GemmSm90, "epilogue_tile", _direct_stores),
    "evict": lambda: _with_policies(lambda kw: _evict_first_policy,
                                    (cpasync.CopyBulkTensorTileS2GOp,)),
    "keepab": lambda: _with_policies(lambda kw: _evict_last_policy),
    # A (unicast in a 2x1 cluster) kept, B (multicast) as is or first out
    "keepa": lambda: _with_policies(lambda kw: _evict_last_policy,
                                    (cpasync.CopyBulkTensorTileG2SOp,)),
    "keepa-firstb": lambda: _with_policies(
        lambda kw: _evict_first_policy if "mcast_mask" in kw else _evict_last_policy),
    "stg": lambda: setattr(GemmSm90, "epilogue_tile", _smem_staged_stores),
    **{f"g{g}": (lambda g=g: _init_with(group_m=g)) for g in (4, 8, 32)},
    "pdl": lambda: _init_with(pdl=True),
    "spin": lambda: setattr(cute.arch, "mbarrier_wait", _asm_wait("test_wait")),
    "trywait": lambda: setattr(cute.arch, "mbarrier_wait", _asm_wait("try_wait")),
}


def _restore():
    GemmSm90.__init__, GemmSm90.epilogue_tile, sm90.cute, cute.arch.mbarrier_wait = ORIGINAL
    sm90.GemmSm90 = GemmSm90
    bridge._RESOLVED.clear()
    KERNELS._mem.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="3000x5000x3072,4096x4096x4096,2048x2048x2048")
    ap.add_argument("--variants", default="base,noepi*,nostore*,n32")
    ap.add_argument("--plan", default="dict()", help="schedule fields (forced_plan)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default="")
    ap.add_argument("--graphs", action="store_true",
                    help="also time each contender in CUDA graphs (twice, alternating)")
    ap.add_argument("--power", type=float, default=0.0,
                    help="seconds of back-to-back calls per contender under nvidia-smi")
    args = ap.parse_args()
    fields = parse_configs(f"[{args.plan}]")[0]
    names = args.variants.split(",")
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    cases = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = [((torch.randn(m, k, device="cuda") / 4).bfloat16(),
                 (torch.randn(n, k, device="cuda") / 4).bfloat16(),
                 torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
                for _ in range(input_sets_needed((m * k + n * k + m * n) * 2))]
        cases.append(((m, n, k), sets, {}))
    for name in names:  # each variant's builds under its own patch
        _restore()
        VARIANTS[name]()
        for _, sets, plans in cases:
            plans[name] = forced_plan(sets[0][0], sets[0][1], **fields)
    _restore()
    rows, records, power_rows = [], [], []
    for shape, sets, plans in cases:
        x, w, y = sets[0]
        ref = x.float() @ w.float().t()
        errs = {}
        for name, plan in plans.items():
            y.fill_(float("nan"))
            run_plan(plan, x, w, y)
            torch.cuda.synchronize()
            errs[name] = (y.float() - ref).abs().max().item()
        contenders = {"cublas": lambda s: torch.matmul(s[0], s[1].t(), out=s[2])}
        for name, plan in plans.items():
            contenders[name] = lambda s, plan=plan: run_plan(plan, s[0], s[1], s[2])
        t = bench_interleaved(contenders, sets, rounds=args.rounds)
        cublas = t["cublas"].median_ms
        graphs = {name: [] for name in contenders}
        for order in ((list(contenders), list(contenders)[::-1]) if args.graphs else ()):
            for name in order:
                graphs[name].append(graph_ms(contenders[name], sets) * 1e3)
        for name in plans:
            ratio = cublas / t[name].median_ms
            graph = (" / ".join(f"{g:.2f}" for g in graphs[name]) + " ("
                     + " / ".join(f"{c:.2f}" for c in graphs["cublas"]) + ")"
                     if args.graphs else "")
            rows.append(["x".join(map(str, shape)), name, f"{t[name].median_ms * 1e3:.1f}",
                         f"{cublas * 1e3:.1f}", f"{ratio:.3f}", graph, f"{errs[name]:.3f}"])
            records.append(dict(shape=shape, variant=name, us=t[name].median_ms * 1e3,
                                cublas_us=cublas * 1e3, ratio=ratio, max_err=errs[name],
                                graph_us=graphs[name], cublas_graph_us=graphs["cublas"]))
        for name, fn in contenders.items() if args.power else ():
            p = sustained(fn, sets, args.power)
            power_rows.append(["x".join(map(str, shape)), name, f"{p['us']:.1f}",
                               f"{p['mhz']:.0f}", f"{p['watts']:.0f}", f"{p['celsius']:.0f}"])
            records.append(dict(shape=shape, variant=name, sustained=p))
    print(f"{device_name()} | commit {commit_id()} | plan {args.plan}")
    if power_rows:
        print(format_table(["M x N x K", "back to back", "us", "SM MHz", "W", "C"], power_rows))
    print(format_table(["M x N x K", "variant", "us", "cuBLAS us", "ratio",
                        "graph us (cuBLAS)", "max err"], rows))
    if args.out:
        save_results(args.out, "gemm_epilogue_cost", dict(device=device_name(),
                                                          commit=commit_id(), plan=args.plan,
                                                          results=records))


if __name__ == "__main__":
    main()
