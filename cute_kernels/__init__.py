"""cute-kernels: GPU kernels written with the CuTe Python DSL, called from PyTorch.

The public names below are loaded on first use (PEP 562), so ``import cute_kernels`` and the
command line (``cute-kernels --help``, ``ptx --list``, ``layout``, ``cache``) start without
importing torch or the DSL. The first access to any op loads every op module together, which
also registers all ``torch.ops.cute_kernels.*`` custom ops (``import cute_kernels.ops.gemm``
and its siblings do the same for code that only goes through ``torch.ops``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS = {
    "CacheOffloader": ".offload",
    "ColumnSparseAttention": ".column_sparse_module",
    "ColumnSparseMLP": ".column_sparse_mlp_module",
    "GatedMLP": ".modules",
    "SmPartition": ".partition",
    "attention": ".ops.attention",
    "attention_colsum": ".ops.attention",
    "block_mask_from_dense": ".ops.block_sparse",
    "block_sparse_attention": ".ops.block_sparse",
    "bsr_sddmm": ".ops.bsr",
    "bsr_softmax": ".ops.bsr",
    "bsr_spmm": ".ops.bsr",
    "column_indices": ".ops.column_sparse",
    "column_sparse_attention": ".ops.column_sparse",
    "column_sparse_mlp": ".ops.column_sparse_mlp",
    "scatter_add": ".ops.column_sparse_mlp",
    "topk_indices": ".ops.column_sparse",
    "pack_mask": ".ops.bitpack",
    "unpack_mask": ".ops.bitpack",
    "gated_mlp_up": ".ops.gated_mlp",
    "pack_gated_weight": ".ops.gated_mlp",
    "unpack_gated_weight": ".ops.gated_mlp",
    "gemm": ".ops.gemm",
    "linear": ".ops.gemm",
    "UnsupportedGPUError": ".runtime.arch",
    "force_path": ".runtime.arch",
}
#: submodules reachable as attributes (``ck.reference.attention``, ``ck.masks.causal()``)
#: without an explicit import
_SUBMODULES = ("masks", "reference")

__all__ = [
    "CacheOffloader",
    "ColumnSparseAttention",
    "ColumnSparseMLP",
    "GatedMLP",
    "SmPartition",
    "UnsupportedGPUError",
    "attention",
    "attention_colsum",
    "block_mask_from_dense",
    "block_sparse_attention",
    "bsr_sddmm",
    "bsr_softmax",
    "bsr_spmm",
    "column_indices",
    "column_sparse_attention",
    "column_sparse_mlp",
    "force_path",
    "gated_mlp_up",
    "gemm",
    "linear",
    "masks",
    "pack_gated_weight",
    "pack_mask",
    "reference",
    "scatter_add",
    "topk_indices",
    "unpack_gated_weight",
    "unpack_mask",
]

if TYPE_CHECKING:  # static tools see the eager imports
    from . import masks, reference
    from .column_sparse_mlp_module import ColumnSparseMLP
    from .column_sparse_module import ColumnSparseAttention
    from .modules import GatedMLP
    from .offload import CacheOffloader
    from .ops.attention import attention, attention_colsum
    from .ops.bitpack import pack_mask, unpack_mask
    from .ops.block_sparse import block_mask_from_dense, block_sparse_attention
    from .ops.bsr import bsr_sddmm, bsr_softmax, bsr_spmm
    from .ops.column_sparse import column_indices, column_sparse_attention, topk_indices
    from .ops.column_sparse_mlp import column_sparse_mlp, scatter_add
    from .ops.gated_mlp import gated_mlp_up, pack_gated_weight, unpack_gated_weight
    from .ops.gemm import gemm, linear
    from .runtime.arch import UnsupportedGPUError, force_path


def _load_exports() -> None:
    for name, module in _EXPORTS.items():
        globals()[name] = getattr(importlib.import_module(module, __name__), name)


def __getattr__(name: str):
    if name in _EXPORTS:
        _load_exports()
        return globals()[name]
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
