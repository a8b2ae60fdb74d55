"""Flash attention forward: ``sm90.AttentionSm90`` (TMA + WGMMA, producer/consumer
warpgroups) and ``sm80.AttentionSm80`` (FlashAttention-2 with mma.sync), the online softmax
they share, the column-sum collaborator, and the seams the sparse kernels plug into: the
key-block iterators (``block_info``: dense, causal, packed key rows, block lists), the K/V
loaders (``kv_loader``) and the element masks of partial blocks (``mask_mod``)."""
