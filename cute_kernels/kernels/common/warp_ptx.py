"""PTX the CuTe DSL does not wrap as plain register / global operations.

Warp-level: movmatrix (an 8 x 8 16-bit matrix transposed across a warp's registers), bf16x2
packing and one mma.sync m16n8k16 on raw fragment registers, which let a kernel run a tiny MMA
on data already in registers in an accumulator layout (e.g. P after the softmax) without a
round trip through shared memory. Inter-CTA: an acquire load and nanosleep, to poll a counter
that other CTAs advance (the GEMM's wave drift limiter); a reduction without return (many
CTAs raising one maximum); loads from a cluster peer's shared memory (the split-KV cluster
combine).
"""

from __future__ import annotations

from cutlass import Float32, Int32, Int64
from cutlass._mlir import ir
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


def _i32(x) -> ir.Value:
    return Int32(x).ir_value()


@dsl_user_op
def movmatrix_trans(word, *, loc=None, ip=None) -> Int32:
    """Transpose an 8 x 8 matrix of 16-bit values held one 32-bit word per lane: lane l holds
    row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1 before and after (of the transpose)."""
    return Int32(llvm.inline_asm(
        T.i32(), [_i32(word)], "movmatrix.sync.aligned.m8n8.trans.b16 $0, $1;", "=r,r",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip))


@dsl_user_op
def pack_bf16x2(lo, hi, *, loc=None, ip=None) -> Int32:
    """Two fp32 values rounded to bf16 in one word (``lo`` in the low half)."""
    return Int32(llvm.inline_asm(
        T.i32(), [Float32(hi).ir_value(), Float32(lo).ir_value()],
        "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip))


@dsl_user_op
def mma_m16n8k16_bf16(a, b, c, *, loc=None, ip=None):
    """D = A B + C with mma.sync.m16n8k16 (bf16 inputs, fp32 accumulators) on raw fragments:
    ``a`` 4 words, ``b`` 2 words, ``c`` 4 fp32 values in the PTX ISA's register order.
    Returns D's 4 fp32 values."""
    operands = [_i32(x) for x in a] + [_i32(x) for x in b] + [Float32(x).ir_value() for x in c]
    result = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4), operands,
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
        "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip)
    return [Float32(llvm.extractvalue(T.f32(), result, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def ld_acquire_gpu(address, *, loc=None, ip=None) -> Int32:
    """``ld.acquire.gpu`` of a global int32 at ``address`` (an Int64 from ``ptr.toint()``):
    polls a counter other CTAs advance with a release."""
    return Int32(llvm.inline_asm(
        T.i32(), [Int64(address).ir_value()], "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip))


@dsl_user_op
def nanosleep(ns: int, *, loc=None, ip=None) -> None:
    """Suspend the thread for about ``ns`` nanoseconds (a polite spin-wait)."""
    llvm.inline_asm(None, [], f"nanosleep.u32 {int(ns)};", "", has_side_effects=True,
                    is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@dsl_user_op
def bulk_reduce_add_s2g(gmem_address, smem_address, nbytes, dtype_suffix: str, *, loc=None,
                        ip=None) -> None:
    """``cp.reduce.async.bulk .add``: add ``nbytes`` (a multiple of 16) of 16-bit values from
    shared memory into global memory, element by element in the L2 (atomic per element),
    tracked by the issuing thread's bulk async-group (commit / wait with
    ``cute.arch.cp_async_bulk_commit_group`` / ``cp_async_bulk_wait_group``). Both addresses
    16-byte aligned; ``dtype_suffix`` ``bf16`` or ``f16``. sm_90+."""
    llvm.inline_asm(
        None, [Int64(gmem_address).ir_value(), Int32(smem_address).ir_value(),
               Int32(nbytes).ir_value()],
        f"cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.{dtype_suffix} "
        "[$0], [$1], $2;", "l,r,r", has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@dsl_user_op
def bulk_copy_g2s(smem_address, gmem_address, nbytes, mbar_address, *, loc=None,
                  ip=None) -> None:
    """``cp.async.bulk`` global -> shared: ``nbytes`` (a multiple of 16) contiguous bytes, both
    addresses 16-byte aligned, completing ``nbytes`` of the transaction count of the mbarrier
    at ``mbar_address`` (smem addresses as 32-bit ints, the global one as an Int64). sm_90+."""
    llvm.inline_asm(
        None, [Int32(smem_address).ir_value(), Int64(gmem_address).ir_value(),
               Int32(nbytes).ir_value(), Int32(mbar_address).ir_value()],
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, "
        "[$3];", "r,l,r,r", has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@dsl_user_op
def red_max_s32(gmem_address, value, *, loc=None, ip=None) -> None:
    """``red.relaxed.gpu.global.max.s32``: raise the int32 at ``gmem_address`` (an Int64 from
    ``ptr.toint()``) to ``value`` without returning the old value, so the issuing warp does not
    wait on a round trip through the L2 (many CTAs reducing into one word)."""
    llvm.inline_asm(
        None, [Int64(gmem_address).ir_value(), _i32(value)],
        "red.relaxed.gpu.global.max.s32 [$0], $1;", "l,r", has_side_effects=True,
        is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@dsl_user_op
def red_add_v4_16x2(gmem_address, words, dtype_suffix: str, *, loc=None, ip=None) -> None:
    """``red.global.add.noftz.v4.{bf16x2,f16x2}``: add 8 16-bit values (four 32-bit words,
    two values each) into 16 aligned bytes of global memory at ``gmem_address`` (an Int64),
    atomically per element, without a return trip. sm_90+."""
    llvm.inline_asm(
        None, [Int64(gmem_address).ir_value(), *(_i32(w) for w in words)],
        f"red.global.add.noftz.v4.{dtype_suffix}x2 [$0], {{$1, $2, $3, $4}};", "l,r,r,r,r",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip)


_DSMEM_ADDRESS = "{ .reg .b32 peer; mapa.shared::cluster.u32 peer, $%d, $%d; "


@dsl_user_op
def ld_dsmem_f32(smem_address, rank, *, loc=None, ip=None) -> Float32:
    """The fp32 at this CTA's shared-memory address ``smem_address`` (an Int32 from
    ``ptr.toint()``) in the shared memory of cluster CTA ``rank`` (``mapa`` then
    ``ld.shared::cluster``). Kept in program order against barriers (side effects)."""
    return Float32(llvm.inline_asm(
        T.f32(), [_i32(smem_address), _i32(rank)],
        _DSMEM_ADDRESS % (1, 2) + "ld.shared::cluster.f32 $0, [peer]; }", "=f,r,r",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip))


@dsl_user_op
def ld_dsmem_v4_f32(smem_address, rank, *, loc=None, ip=None) -> list:
    """Four fp32 at 16-byte aligned ``smem_address`` in cluster CTA ``rank``'s shared memory
    (one ``ld.shared::cluster.v4.f32``), as :func:`ld_dsmem_f32`."""
    result = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4), [_i32(smem_address), _i32(rank)],
        _DSMEM_ADDRESS % (4, 5) + "ld.shared::cluster.v4.f32 {$0, $1, $2, $3}, [peer]; }",
        "=f,=f,=f,=f,r,r", has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)
    return [Float32(llvm.extractvalue(T.f32(), result, [i], loc=loc, ip=ip)) for i in range(4)]
