"""The finishing pass of a split-K or swap-AB GEMM: sum the fp32 partials, run the epilogue,
write the output.

The GEMM kernel writes each K slice's partial product to an fp32 workspace (the slices are the
launch's batch dim; with swap-AB the workspace holds C^T). This kernel reads it through a
strided (M, N, splits) view in the output's coordinates, so the same code finishes plain and
transposed workspaces: out[m, n] = epilogue(sum_s ws[m, n, s]), summed in slice order (the
result does not depend on which slice finished first). The ``Epilogue`` hook is the GEMM
kernels' own (bias along N, then the activation), so a split GEMM computes what an unsplit
one does, with one rounding.

Roles: one thread per ``VEC`` consecutive outputs of a row (N is a multiple of 8), 256
threads per CTA, no shared memory; the workspace is small and L2-resident (a few MB at
decode shapes), so its reads are scalar and the output's are 16-byte stores when aligned.
Plain SIMT code; the op launches it after the Hopper GEMM of a split schedule, from the same
host call (``split_k.SplitKGemm``).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32

from ..common.dsl import python_unrolled
from .epilogue import Epilogue

VEC = 8


class SplitKReduce:
    """``mOut (M, N) = epilogue(sum over s of mWs (M, N, S))``; ``mWs`` any strides, ``mOut``
    unit stride along N; ``mBias`` the (N,) bias of the epilogue (None without one)."""

    threads = 256

    def __init__(self, epilogue: Epilogue | None = None):
        self.epilogue = epilogue or Epilogue()

    @cute.jit
    def __call__(self, mWs: cute.Tensor, mOut: cute.Tensor, mBias, stream):
        units = mOut.shape[0] * (mOut.shape[1] // VEC)
        self.kernel(mWs, mOut, mBias).launch(
            grid=(cute.ceil_div(units, self.threads), 1, 1), block=(self.threads, 1, 1),
            stream=stream)

    @cute.kernel
    def kernel(self, mWs: cute.Tensor, mOut: cute.Tensor, mBias):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        rows, cols = mOut.shape[0], mOut.shape[1]
        vecs_per_row = cols // VEC
        unit = bidx * self.threads + tidx
        if unit < rows * vecs_per_row:
            m, nv = unit // vecs_per_row, unit % vecs_per_row
            n0 = nv * VEC
            acc = cute.make_rmem_tensor((VEC,), Float32)
            acc.fill(0.0)
            for s in cutlass.range(mWs.shape[2], unroll=1):
                with python_unrolled():
                    for j in cutlass.range_constexpr(VEC):
                        acc[j] = acc[j] + mWs[m, n0 + j, s]
            if cutlass.const_expr(not self.epilogue.is_identity):
                coords = cute.local_tile(cute.make_identity_tensor((rows, cols)), (1, VEC),
                                         (m, nv))
                self.epilogue.visit(acc, coords, cols, mBias)
            out = cute.make_rmem_tensor((VEC,), mOut.element_type)
            out.store(acc.load().to(mOut.element_type))
            cute.autovec_copy(out, cute.local_tile(mOut, (1, VEC), (m, nv))[0, None])
