"""GEMM epilogues: the one extension point where later kernels fuse into the GEMM.

An epilogue is a *compile-time* object (hashable config, part of the compile-cache key) whose
``visit`` sees a thread's fp32 accumulator fragment together with the (m, n) coordinate of
every element, in the same fragment layout on both architectures, and rewrites it in place
before the output conversion and store. Both GEMM kernels call it at exactly one place (after
the mainloop of a tile, before the store), so an epilogue is written once for both paths.

Shipped: ``Epilogue(bias=..., activation=None | "gelu" | "gelu_tanh" | "silu" | "relu")``.
The gated MLP is not a subclass: a GEMM built with ``gated=`` runs ``visit`` on the 2I
pre-activations (bias), then ``gate_pairs`` turns each thread's in-register (up, gate)
column pair into act(gate) * up and ``gated_store_copy`` writes the half-width tile.
Planned epilogues (scatter into a cache, subtraction of a cached tile, residual add) would
subclass ``Epilogue``; extra tensors would travel through the ``mBias`` argument slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import Float32

from ..common.activation_names import ACTIVATIONS, GATED_TO_ACT
from ..common.constants import LOG2E
from ..common.dsl import python_unrolled

SQRT_2_OVER_PI = 0.7978845608028654
INV_SQRT2 = 0.7071067811865476


@cute.jit
def activate(x: Float32, activation: cutlass.Constexpr) -> Float32:
    """Elementwise activation on an fp32 value; ``activation`` is fixed at compile time."""
    y = x
    if cutlass.const_expr(activation == "relu"):
        y = cute.math.max(x, Float32(0.0))
    elif cutlass.const_expr(activation == "silu"):
        # x * sigmoid(x), exp via exp2 with log2(e) folded in
        y = x / (Float32(1.0) + cute.math.exp2(-x * Float32(LOG2E), fastmath=True))
    elif cutlass.const_expr(activation == "gelu"):
        y = Float32(0.5) * x * (Float32(1.0) + cute.math.erf(x * Float32(INV_SQRT2)))
    elif cutlass.const_expr(activation == "gelu_tanh"):
        inner = Float32(SQRT_2_OVER_PI) * (x + Float32(0.044715) * x * x * x)
        y = Float32(0.5) * x * (Float32(1.0) + cute.math.tanh(inner, fastmath=True))
    return y


@dataclass(frozen=True)
class Epilogue:
    """bias (a length-N vector added per column) then an optional activation.

    ``bias_dim`` 0 adds the bias per row instead: a swap-AB GEMM computes C^T, whose rows are
    the output's columns."""

    bias: bool = False
    activation: str | None = None
    bias_dim: int = 1

    def __post_init__(self):
        if self.bias_dim not in (0, 1):
            raise ValueError(f"bias_dim must be 0 (rows) or 1 (columns), got {self.bias_dim}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")

    @property
    def is_identity(self) -> bool:
        return not self.bias and self.activation is None

    @cute.jit
    def visit(self, tRrAcc: cute.Tensor, tRcAcc: cute.Tensor, n_limit, mBias):
        """Rewrite the fp32 fragment ``tRrAcc`` in place; ``tRcAcc`` holds each element's
        (m, n) in the output; ``mBias`` is the bias vector (ignored without ``bias``), indexed
        by the coordinate of dim ``bias_dim`` below ``n_limit``."""
        with python_unrolled():
            for i in cutlass.range_constexpr(cute.size(tRrAcc)):
                v = tRrAcc[i]
                if cutlass.const_expr(self.bias):
                    n = tRcAcc[i][self.bias_dim]
                    if n < n_limit:
                        v = v + Float32(mBias[n])
                if cutlass.const_expr(self.activation is not None):
                    v = activate(v, self.activation)
                tRrAcc[i] = v


def gated_store_copy(c_dtype, gated_tv):
    """The tiled copy that writes gated fragments into the half-width output tile.

    ``gated_tv`` is ``layouts.tile_mma_tv`` of the gated atom (sm80 16x4x16 or the gated wgmma
    layout) over the kernel's warps and tile: the same partitioning as the accumulator tile,
    fed the gated atom, so ``partition_D`` of the half-width tile lines up value by value with
    the accumulator pairs (tests/test_layouts_vs_cute.py proves it per thread).
    """
    layout_tv = cute.make_layout(gated_tv.layout.shape, stride=gated_tv.layout.stride)
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), c_dtype)
    return cute.make_tiled_copy(atom, layout_tv, gated_tv.tile)


@cute.jit
def gate_pairs(tRrAcc: cute.Tensor, tGrC: cute.Tensor, gated: cutlass.Constexpr):
    """``tGrC[v] = act(gate) * up`` from the thread's accumulator pair (2v: up, 2v + 1: gate)."""
    with python_unrolled():
        for v in cutlass.range_constexpr(cute.size(tGrC)):
            up, gate = tRrAcc[2 * v], tRrAcc[2 * v + 1]
            tGrC[v] = (activate(gate, GATED_TO_ACT[gated]) * up).to(tGrC.element_type)

