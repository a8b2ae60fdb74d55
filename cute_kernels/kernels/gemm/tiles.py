"""The Hopper GEMM's default tile and cluster, apart from the DSL code (this module imports
nothing) so the op layer and the tuning tables read them without loading a kernel."""

from __future__ import annotations

DEFAULT_TILE = (128, 256, 64)  # CTA tile (M, N, K); the op sizes the persistent grid from it
DEFAULT_CLUSTER_M = 2  # CTAs per cluster along M: B tiles multicast to both
