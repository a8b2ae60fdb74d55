"""Every public op's kernels, by name: what ``cute-kernels ptx`` and ``demo`` iterate over.

An entry names the op's variants (the distinct kernels it dispatches between) and how to build
each for a kernel path. Adding a kernel to the package = adding an entry here
(docs/adding-a-kernel.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .kernels.common.activation_names import GATED_ACTIVATIONS
from .runtime.arch import PATH_OF_TARGET
from .runtime.compile import Build, compile_ptx


@dataclass(frozen=True)
class KernelEntry:
    name: str
    summary: str
    variants: tuple[str, ...]
    build: Callable[[str, str], Build]  # (variant, path) -> Build


# The entries import torch, the DSL and the ops only inside ``build``: listing them (``ptx
# --list``) stays instant. tests/test_registry.py checks these tuples against the ops' own.
BITPACK_VARIANTS = ("flat", "rows")


def _bitpack_entry(op: str, summary: str) -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        from .ops import bitpack

        return bitpack.make_build(op, variant)

    return KernelEntry(op, summary, BITPACK_VARIANTS, build)


GEMM_VARIANTS = {"tn": ("k", "k"), "nn": ("k", "n"), "tt": ("m", "k"), "nt": ("m", "n")}


def _gemm_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from .kernels.gemm.epilogue import Epilogue
        from .ops.gemm import make_build

        a_major, b_major = GEMM_VARIANTS[variant]
        return make_build(path, torch.bfloat16, torch.bfloat16, a_major, b_major, Epilogue())

    return KernelEntry("gemm", "bf16 C = A @ B (+bias, activation); variants by operand majors "
                       "(tn: A K-major, B K-major = linear)", tuple(GEMM_VARIANTS), build)


def _gated_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from .ops.gated_mlp import make_build

        return make_build(path, torch.bfloat16, torch.bfloat16, "k", "k", variant)

    return KernelEntry("gated_mlp_up", "bf16 act(x @ W_gate^T) * (x @ W_up^T) in one GEMM over "
                       "the interleaved weight; variants by activation", GATED_ACTIVATIONS, build)


ATTENTION_VARIANTS = {"d64": (64, False), "d128": (128, False), "d64-causal": (64, True),
                      "d128-causal": (128, True)}


def _attention_entries() -> list[KernelEntry]:
    def build(variant: str, path: str) -> Build:
        import torch

        from .ops.attention import make_build

        return make_build(path, torch.bfloat16, *ATTENTION_VARIANTS[variant])

    def build_colsum(variant: str, path: str) -> Build:
        import torch

        from .ops.attention import make_build

        return make_build(path, torch.bfloat16, ATTENTION_VARIANTS[variant][0], False,
                          colsum=True)

    return [KernelEntry("attention", "bf16 flash attention forward (o, lse); variants by head "
                        "dim and causal mask", tuple(ATTENTION_VARIANTS), build),
            KernelEntry("attention_colsum", "bf16 attention + column sums of the previous "
                        "step's probabilities per 192-query group; variants by head dim",
                        ("d64", "d128"), build_colsum)]


COLUMN_SPARSE_VARIANTS = {"d64-g128": (64, 128), "d64-g192": (64, 192), "d128-g128": (128, 128),
                          "d128-g192": (128, 192)}


def _column_sparse_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from .ops.column_sparse import make_build

        return make_build(path, torch.bfloat16, *COLUMN_SPARSE_VARIANTS[variant], False)

    return KernelEntry("column_sparse_attention", "bf16 attention of each query group over its "
                       "own list of key rows (gathered into dense tiles); variants by head dim "
                       "and group", tuple(COLUMN_SPARSE_VARIANTS), build)


TOPK_VARIANTS = {"bf16": ("bfloat16", 8), "fp32": ("float32", 4)}


def _topk_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from .ops.topk import make_build

        dtype, vec = TOPK_VARIANTS[variant]
        return make_build(getattr(torch, dtype), vec)

    return KernelEntry("topk_indices", "k largest columns per row as increasing lists: radix "
                       "select (smem histograms) + ordered write; variants by score dtype",
                       tuple(TOPK_VARIANTS), build)


BLOCK_SPARSE_VARIANTS = {"d64": (64, None), "d128": (128, None), "d128-causal": (128, "causal")}


def _block_sparse_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from . import masks
        from .ops.block_sparse import make_build

        head_dim, mask = BLOCK_SPARSE_VARIANTS[variant]
        return make_build(path, torch.bfloat16, head_dim, getattr(masks, mask)() if mask else None)

    return KernelEntry("block_sparse_attention", "bf16 attention over FlexAttention-style block "
                       "lists (128 x 128 blocks, element mask in partial ones); variants by "
                       "head dim and mask", tuple(BLOCK_SPARSE_VARIANTS), build)


#: variant -> (stage, G, D); every G and D compile alike (tests/test_bsr.py builds them all)
BSR_VARIANTS = {"sddmm-g64-d128": ("sddmm", 64, 128), "sddmm-g16-d64": ("sddmm", 16, 64),
                "sddmm-chunks-g64-d128": ("sddmm_chunks", 64, 128),
                "softmax-g64": ("softmax", 64, None), "spmm-g64-d128": ("spmm", 64, 128),
                "spmm-g128-d128": ("spmm", 128, 128)}


def _bsr_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from .ops.bsr import make_build

        return make_build(*((BSR_VARIANTS[variant][0], torch.bfloat16)
                            + BSR_VARIANTS[variant][1:]))

    return KernelEntry("bsr", "bf16 BCSR attention stages on torch sparse_bsr tensors: SDDMM, "
                       "row softmax over stored blocks, SpMM (mma.sync on both paths); variants "
                       "by stage, block G and head dim",
                       tuple(BSR_VARIANTS), build)


MLP_DELTA_VARIANTS = {"up-m-major": ("up", True), "up-row-major": ("up", False),
                      "up-gated": ("up", True),
                      "down": ("down", None), "scatter-m-major": ("scatter", True),
                      "scatter-m-major-vec": ("scatter", True),
                      "scatter-m-major-rmw": ("scatter", True),
                      "scatter-row-major": ("scatter", False)}


def _mlp_delta_entry() -> KernelEntry:
    def build(variant: str, path: str) -> Build:
        import torch

        from .ops.column_sparse_mlp import (
            DOWN_CONFIG,
            UP_CONFIG,
            down_sm90_key,
            make_build,
            up_sm90_key,
        )

        op, m_major = MLP_DELTA_VARIANTS[variant]
        dtype = torch.bfloat16
        # "-gated": SwiGLU on interleaved (up, gate) W1 rows
        act = "swiglu" if variant.endswith("-gated") else "gelu_tanh"
        # the group-128 kernels of each path: on Hopper the WGMMA ones (the op's defaults
        # there, ops.column_sparse_mlp.SM90_UP_ON / SM90_DOWN_ON), mma.sync on Ampere
        if op == "up" and path == "hopper":
            return make_build("up_sm90", up_sm90_key(dtype, act, True, m_major))
        if op == "down" and path == "hopper":
            return make_build("down_sm90", down_sm90_key(dtype))
        if op == "up":
            return make_build(op, (dtype, act, True, 128, 128, m_major,
                                   tuple(UP_CONFIG.items())))
        if op == "down":
            return make_build(op, (dtype, 128, 128, tuple(DOWN_CONFIG.items())))
        # the TMA bulk reduction needs sm_90 (and an M-major cache); "-vec": 16-byte aligned
        # source rows, loaded as vectors; "-rmw": vector loads, adds and stores of the cache
        # instead of bulk reductions (variants of the bulk path only)
        bulk = m_major and path == "hopper"
        rmw = bulk and variant.endswith("-rmw")
        # one transposed-tile buffer: the op's default launch, one CTA per tile (a persistent
        # launch takes two; tests/test_ptx.py builds both)
        return make_build(op, (dtype, 128, m_major, bulk, bulk and variant.endswith(("-vec",
                                                                                     "-rmw")),
                               "rmw" if rmw else "bulk", 1, False))

    return KernelEntry("column_sparse_mlp", "bf16 column-sparse MLP delta: mm1 with gathered W1 "
                       "rows and the cache epilogue, mm2 with gathered W2 columns (WGMMA with a "
                       "gather producer on Hopper, mma.sync on Ampere), and the scatter-add "
                       "writeback (TMA bulk reduction on Hopper); variants by kernel and cache "
                       "layout", tuple(MLP_DELTA_VARIANTS), build)


def entries() -> dict[str, KernelEntry]:
    items = [
        _gemm_entry(),
        _gated_entry(),
        *_attention_entries(),
        _column_sparse_entry(),
        _block_sparse_entry(),
        _bsr_entry(),
        _mlp_delta_entry(),
        _topk_entry(),
        _bitpack_entry("pack_mask", "bool [..., N] -> uint8 [..., ceil(N/8)], little-endian bits"),
        _bitpack_entry("unpack_mask", "uint8 [..., ceil(N/8)] -> bool [..., N]"),
    ]
    return {e.name: e for e in items}


def get_entry(name: str) -> KernelEntry:
    table = entries()
    if name not in table:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(table)}")
    return table[name]


def ptx_for(name: str, target: str, variant: str | None = None) -> dict[str, str]:
    """{variant: PTX} for kernel ``name`` compiled for ``target`` (sm_80, sm_90a, ...)."""
    if target not in PATH_OF_TARGET:
        raise ValueError(f"arch must be one of {', '.join(PATH_OF_TARGET)}, got {target!r}")
    entry = get_entry(name)
    variants = entry.variants if variant is None else (variant,)
    for v in variants:
        if v not in entry.variants:
            raise ValueError(f"{name} has variants {', '.join(entry.variants)}, not {v!r}")
    path = PATH_OF_TARGET[target]
    return {v: compile_ptx(entry.build(v, path), target) for v in variants}


#: Instruction families counted in the PTX (``demo`` without a GPU, and the PTX tests).
INSTRUCTIONS = {
    "mma.sync": r"\bmma\.sync\.aligned\b",
    "wgmma": r"\bwgmma\.mma_async\b",
    "cp.async": r"\bcp\.async\.(?:ca|cg)\.shared\b",
    "cp.async.bulk.tensor": r"\bcp\.async\.bulk\.tensor\b",
    "ldmatrix": r"\bldmatrix\.sync\b",
    "stmatrix": r"\bstmatrix\.sync\b",
    "setmaxnreg": r"\bsetmaxnreg\b",
    "mbarrier": r"\bmbarrier\.",
    # 16-byte global accesses: .v4 of 32-bit or .v2 of 64-bit elements.
    "ld.global.v4": r"\bld\.global(?:\.\w+)*\.(?:v4\.[busf]32|v2\.[busf]64)\b",
    "st.global.v4": r"\bst\.global(?:\.\w+)*\.(?:v4\.[busf]32|v2\.[busf]64)\b",
    "shfl.sync": r"\bshfl\.sync\b",
    "cp.reduce.async.bulk": r"\bcp\.reduce\.async\.bulk\.global\b",
}


def instruction_mix(ptx: str) -> dict[str, int]:
    """How often each instruction family appears in ``ptx`` (static count)."""
    return {name: len(re.findall(pattern, ptx)) for name, pattern in INSTRUCTIONS.items()}
