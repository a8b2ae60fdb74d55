"""Split-K and swap-AB through the fp32 workspace, from one host call.

``linear`` on a long K with few output tiles (decode on small weights, skinny M) cuts K into
``splits`` equal slices that run as the batch dim of one GEMM launch writing fp32 partials,
then :class:`~.split_reduce.SplitKReduce` sums them and runs the epilogue. Both launches are
traced into one ``@cute.jit`` here, and every strided view they need is made at trace time
from the plain 2-D tensors the op holds: a call is one TVM-FFI call on four tensors (five
with a bias), not two calls on five 3-D views that torch first has to build (``as_strided``
~2 us each, a TVM-FFI call ~5-7 us: these launches are host-bound in eager mode).

The views (``S`` = splits, ``N_p`` = N rounded up to 8, so every slice of the workspace starts
on a 32-byte boundary):

* operands: ``(R, K) : (r, k)`` -> ``(R, K / S, S) : (r, k, k K / S)`` (slice ``s`` is the
  launch's batch entry ``s``); ``K / S`` is a multiple of 8 (``tuning.gemm.split_options``);
* workspace: ``S x M x N_p`` fp32 words (``ops.gemm.workspace_words``); the reduce reads it
  as ``(M, N, S) : (N_p, 1, M N_p)``; the GEMM writes it so, or, swapped (it computes C^T =
  W X^T), as ``(N, M, S) : (1, N_p, M N_p)``: the same words, so the reduce reads along N
  (coalesced) either way.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


def k_slices(shape, stride, splits):
    """(shape, stride) of an ``(R, K) : (r, k)`` operand seen as ``(R, K / S, S) : (r, k,
    k K / S)``, slice ``s`` of K as batch entry ``s``. Plain ints (tests) or the DSL's
    (traced): ``K / S`` is asserted to be a multiple of 8, as TMA needs for the slice stride."""
    rows, k = shape
    rows_stride, k_stride = stride
    slice_k = cute.assume(k // splits, divby=8)
    return (rows, slice_k, splits), (rows_stride, k_stride, k_stride * slice_k)


def workspace_views(m, n, splits, swap: bool):
    """(shape, stride) of the workspace as the GEMM writes it and as the reduce reads it:
    ``(M, N, S) : (N_p, 1, M N_p)`` both, or, swapped, the GEMM's ``(N, M, S) : (1, N_p,
    M N_p)`` (it computes C^T), so the reduce reads along N either way."""
    cols = cute.assume((n + 7) // 8 * 8, divby=8)
    plane = cute.assume(m * cols, divby=8)
    reduce = ((m, n, splits), (cols, 1, plane))
    return ((n, m, splits), (1, cols, plane)) if swap else reduce, reduce


class SplitKGemm:
    """``gemm`` (a ``GemmSm90`` without an epilogue; it writes fp32 partials, of C^T when
    ``swap``) over the K slices, then ``reduce`` (a ``SplitKReduce``), on one stream from
    one call.

    Tensors: ``mX (M, K)`` and ``mW (N, K)`` as ``linear`` takes them (either major, 16-byte
    aligned, the outer stride a multiple of 8 elements); ``mWs`` the workspace, ``(words,)``
    fp32 (``ops.gemm.workspace_words``), contents ignored; ``mOut (M, N)`` row-major; ``mBias`` the
    (N,) bias of the reduce's epilogue or None. ``splits`` divides K into multiples of 8
    elements (the op's schedule checks it: ``tuning.gemm.split_options``).
    """

    def __init__(self, gemm, reduce, swap: bool):
        self.gemm, self.reduce, self.swap = gemm, reduce, swap

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mWs: cute.Tensor,
                 mOut: cute.Tensor, mBias, splits: cutlass.Int32, num_ctas: cutlass.Int32,
                 stream):
        lhs, rhs = (mW, mX) if self.swap else (mX, mW)  # swapped: A is the weight
        gemm_c, reduce_c = workspace_views(mX.shape[0], mW.shape[0], splits, self.swap)
        self.gemm(_view(lhs, *k_slices(lhs.shape, lhs.stride, splits)),
                  _view(rhs, *k_slices(rhs.shape, rhs.stride, splits)),
                  _view(mWs, *gemm_c), None, num_ctas, stream)
        self.reduce(_view(mWs, *reduce_c), mOut, mBias, stream)


def _view(t: cute.Tensor, shape, stride) -> cute.Tensor:
    return cute.make_tensor(t.iterator, cute.make_layout(shape, stride=stride))
