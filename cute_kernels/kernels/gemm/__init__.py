"""The dense GEMM: ``sm90.GemmSm90`` (TMA + WGMMA, warp-specialized, persistent) and
``sm80.GemmSm80`` (cp.async + ldmatrix + mma.sync), with the epilogue hook (bias, activation,
the gated pairing) they share."""
