"""Bitpacked boolean masks: 8 mask entries per byte, little-endian bit order within a byte.

A bool mask costs one byte per entry; packed it costs one bit ("Chipmunk: Deep Dive on GPU
Kernel Optimizations and Systems (Part III)", the public post on column-sparse attention and
MLP kernels, bitpacks its sparsity masks this way; docs/attention.md, References). Both
directions are memory-bound SIMT kernels, the same code on the Hopper and Ampere paths (no
tensor-core or TMA work to specialise).

Two layouts are handled by two kernels each:

* **flat** (``N % 8 == 0`` and contiguous): the mask is one run of bytes; every 16-byte vector
  of mask entries becomes 2 packed bytes. 16-byte loads (pack) / stores (unpack), coalesced
  across the warp, ``UNROLL`` vectors in flight per thread.
* **rows** (any ``N``, any row stride): one thread per packed byte of a row, bounds-checked
  against ``N``; bits past ``N`` in the last byte of a row are written as 0.

Bit tricks (on 32-bit words whose bytes are 0 or 1, little-endian):
``pack4(w) = ((w * 0x00204081) >> 21) & 0xF`` gathers bytes 0..3 into bits 0..3 (the four
partial products land on disjoint bits, so no carries); ``unpack4(n) = (n * 0x00204081) &
0x01010101`` spreads bits 0..3 of ``n`` back to bytes 0..3.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint8, Uint32

SPREAD = 0x00204081
BYTE_LSBS = 0x01010101
VEC = 16  # mask bytes per 16-byte vector in the flat kernels
PACKED_PER_VEC = VEC // 8


@cute.jit
def pack4(word: Uint32) -> Uint32:
    """Bytes (0/1) of a little-endian word -> 4 bits."""
    return ((word * Uint32(SPREAD)) >> Uint32(21)) & Uint32(0xF)


@cute.jit
def unpack4(nibble: Uint32) -> Uint32:
    """4 bits -> bytes (0/1) of a little-endian word."""
    return (nibble * Uint32(SPREAD)) & Uint32(BYTE_LSBS)


class _FlatStream:
    """The flat kernels' shared body: a stream of 16-byte mask vectors <-> 2-byte packed pairs.

    Warp roles: none (SIMT, every thread alike). Pipeline: each thread issues ``unroll``
    independent source loads (coalesced across the warp) before converting and storing any of
    them. Shared memory: none. Thread 0 of CTA 0 also converts the tail shorter than a vector.
    Subclasses say which side is the source and supply ``convert`` (one vector) and ``tail``.
    """

    SRC_PER_VEC: int
    DST_PER_VEC: int

    def __init__(self, threads: int = 256, unroll: int = 8):
        self.threads = threads
        self.unroll = unroll
        self.vecs_per_cta = threads * unroll

    @cute.jit
    def __call__(self, mSrc: cute.Tensor, mDst: cute.Tensor, stream):
        num_vec = cute.size(mSrc) // self.SRC_PER_VEC
        gSrc = cute.zipped_divide(mSrc, (self.SRC_PER_VEC,))  # (per vec, num_vec)
        gDst = cute.zipped_divide(mDst, (self.DST_PER_VEC,))
        # At least one CTA: its thread 0 also handles the tail.
        grid_x = cutlass.max(cute.ceil_div(num_vec, self.vecs_per_cta), 1)
        self.kernel(mSrc, mDst, gSrc, gDst, num_vec).launch(
            grid=(grid_x, 1, 1), block=(self.threads, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(self, mSrc: cute.Tensor, mDst: cute.Tensor, gSrc: cute.Tensor,
               gDst: cute.Tensor, num_vec: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        first = bidx * self.vecs_per_cta + tidx
        rSrc = cute.make_rmem_tensor((self.SRC_PER_VEC, self.unroll), Uint8)
        for u in cutlass.range_constexpr(self.unroll):
            v = first + u * self.threads
            if v < num_vec:
                cute.autovec_copy(gSrc[(None, v)], rSrc[None, u])
        for u in cutlass.range_constexpr(self.unroll):
            v = first + u * self.threads
            if v < num_vec:
                cute.autovec_copy(self.convert(rSrc[None, u]), gDst[(None, v)])
        if bidx == 0 and tidx == 0:
            self.tail(mSrc, mDst, num_vec)


class PackMaskFlat(_FlatStream):
    """Pack a contiguous byte mask of ``T`` entries (``T % 8 == 0``) into ``T // 8`` bytes:
    16-byte loads, 2-byte stores. Launch, warp roles and pipeline: :class:`_FlatStream`."""

    SRC_PER_VEC, DST_PER_VEC = VEC, PACKED_PER_VEC

    @cute.jit
    def convert(self, rMask: cute.Tensor) -> cute.Tensor:
        words = cute.recast_tensor(rMask, Uint32)
        rOut = cute.make_rmem_tensor((PACKED_PER_VEC,), Uint8)
        for b in cutlass.range_constexpr(PACKED_PER_VEC):
            rOut[b] = Uint8(pack4(words[2 * b]) | (pack4(words[2 * b + 1]) << Uint32(4)))
        return rOut

    @cute.jit
    def tail(self, mMask: cute.Tensor, mPacked: cute.Tensor, num_vec: Int32):
        for j in cutlass.range(num_vec * PACKED_PER_VEC, cute.size(mPacked)):
            acc = Uint32(0)
            for b in cutlass.range_constexpr(8):
                acc = acc | (Uint32(mMask[j * 8 + b]) << Uint32(b))
            mPacked[j] = Uint8(acc)


class UnpackMaskFlat(_FlatStream):
    """Unpack ``T // 8`` bytes into a contiguous byte mask of ``T`` entries (``T % 8 == 0``):
    2-byte loads, 16-byte stores. Launch, warp roles and pipeline: :class:`_FlatStream`."""

    SRC_PER_VEC, DST_PER_VEC = PACKED_PER_VEC, VEC

    @cute.jit
    def convert(self, rPacked: cute.Tensor) -> cute.Tensor:
        rOut = cute.make_rmem_tensor((VEC // 4,), Uint32)
        for b in cutlass.range_constexpr(PACKED_PER_VEC):
            byte = Uint32(rPacked[b])
            rOut[2 * b] = unpack4(byte & Uint32(0xF))
            rOut[2 * b + 1] = unpack4(byte >> Uint32(4))
        return cute.recast_tensor(rOut, Uint8)

    @cute.jit
    def tail(self, mPacked: cute.Tensor, mMask: cute.Tensor, num_vec: Int32):
        for j in cutlass.range(num_vec * PACKED_PER_VEC, cute.size(mPacked)):
            byte = Uint32(mPacked[j])
            for b in cutlass.range_constexpr(8):
                mMask[j * 8 + b] = Uint8((byte >> Uint32(b)) & Uint32(1))


class _RowsConfig:
    def __init__(self, threads: int = 128, max_row_ctas: int = 65535):
        self.threads = threads
        self.max_row_ctas = max_row_ctas

    def grid(self, num_bytes, num_rows):
        return (cute.ceil_div(num_bytes, self.threads), cutlass.min(num_rows, self.max_row_ctas), 1)


class PackMaskRows(_RowsConfig):
    """Pack each row of an (R, N) byte mask with any row stride into (R, ceil(N / 8)) bytes.

    Warp roles: none (SIMT). One thread per packed byte: 8 bounds-checked byte loads, so a
    warp's first load touches its whole 256-byte span and the other seven hit L1. (Measured
    on an H100 against a warp-ballot design with 32-byte coalesced loads: this one moved
    1.85x the bytes per second, perf/RESULTS.md.) CTAs stride over rows in grid.y.
    Shared memory: none.
    """

    def __init__(self, threads: int = 256, max_row_ctas: int = 65535):
        super().__init__(threads, max_row_ctas)  # 256 beat 128 by 1.17x (perf/RESULTS.md)

    @cute.jit
    def __call__(self, mMask: cute.Tensor, mPacked: cute.Tensor, stream):
        num_rows, num_bytes = mPacked.shape
        self.kernel(mMask, mPacked).launch(
            grid=self.grid(num_bytes, num_rows), block=(self.threads, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(self, mMask: cute.Tensor, mPacked: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        _, gdimy, _ = cute.arch.grid_dim()
        num_rows, n = mMask.shape
        j = bidx * self.threads + tidx
        if j < mPacked.shape[1]:
            for r in cutlass.range(bidy, num_rows, gdimy):
                acc = Uint32(0)
                for b in cutlass.range_constexpr(8):
                    col = j * 8 + b
                    if col < n:
                        acc = acc | (Uint32(mMask[r, col]) << Uint32(b))
                mPacked[r, j] = Uint8(acc)


class UnpackMaskRows(_RowsConfig):
    """Unpack (R, ceil(N / 8)) bytes into an (R, N) byte mask with any row stride.

    Warp roles: none (SIMT). One thread per mask entry, ``unroll`` entries per thread spaced a
    CTA apart, so every warp store covers 32 consecutive bytes and neighbouring lanes share
    the packed byte they read. All of a thread's loads are issued before its first store (the
    compiler may not move a load past a store to a possibly aliasing tensor). CTAs stride over
    rows in grid.y. Shared memory: none.
    """

    def __init__(self, threads: int = 128, unroll: int = 8, max_row_ctas: int = 65535):
        super().__init__(threads, max_row_ctas)
        self.unroll = unroll

    @cute.jit
    def __call__(self, mPacked: cute.Tensor, mMask: cute.Tensor, stream):
        num_rows, n = mMask.shape
        grid_x = cute.ceil_div(n, self.threads * self.unroll)
        self.kernel(mPacked, mMask).launch(
            grid=(grid_x, cutlass.min(num_rows, self.max_row_ctas), 1),
            block=(self.threads, 1, 1), stream=stream,
        )

    @cute.kernel
    def kernel(self, mPacked: cute.Tensor, mMask: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        _, gdimy, _ = cute.arch.grid_dim()
        num_rows, n = mMask.shape
        col0 = bidx * (self.threads * self.unroll) + tidx
        for r in cutlass.range(bidy, num_rows, gdimy):
            rByte = cute.make_rmem_tensor((self.unroll,), Uint8)
            for u in cutlass.range_constexpr(self.unroll):
                col = col0 + u * self.threads
                rByte[u] = Uint8(0)
                if col < n:
                    rByte[u] = mPacked[r, col // 8]
            for u in cutlass.range_constexpr(self.unroll):
                col = col0 + u * self.threads
                if col < n:
                    bit = (Uint32(rByte[u]) >> Uint32(col % 8)) & Uint32(1)
                    mMask[r, col] = Uint8(bit)
