"""cute-kernels: GPU kernels written with the CuTe Python DSL, called from PyTorch."""

from .modules import GatedMLP
from .ops.attention import attention, attention_colsum
from .ops.bitpack import pack_mask, unpack_mask
from .ops.gated_mlp import gated_mlp_up, pack_gated_weight, unpack_gated_weight
from .ops.gemm import gemm, linear
from .runtime.arch import UnsupportedGPUError, force_path

__version__ = "0.1.0"
__all__ = [
    "GatedMLP",
    "UnsupportedGPUError",
    "attention",
    "attention_colsum",
    "force_path",
    "gated_mlp_up",
    "gemm",
    "linear",
    "pack_gated_weight",
    "pack_mask",
    "unpack_gated_weight",
    "unpack_mask",
]
