"""Random BSR layouts for the BCSR tests (CPU and GPU)."""

import torch


def random_layout(batch, m, n, g, keep, gen, *, dtype=torch.float32, empty_row=True):
    """A ``sparse_bsr`` (*batch, m G, n G) with about ``keep`` of its G x G blocks stored, on
    ``gen``'s device: block (0, 0) always, block row 1 never (when ``empty_row``), and the
    same count in every batch entry (torch's batched BSR needs it). Returns (the BSR tensor,
    the dense element mask of its stored blocks)."""
    device = gen.device
    on = torch.rand(*batch, m, n, generator=gen, device=device) < keep
    if empty_row:
        on[..., 1, :] = False
    on[..., 0, 0] = True
    flat = on.reshape(-1, m, n)
    most = int(flat.sum((1, 2)).max())
    for b in range(flat.shape[0]):
        free = (~flat[b]).nonzero()
        if empty_row:
            free = free[free[:, 0] != 1]
        free = free[: most - int(flat[b].sum())]
        flat[b, free[:, 0], free[:, 1]] = True
    dense = flat.reshape(*batch, m, n).repeat_interleave(g, -2).repeat_interleave(g, -1)
    values = torch.randn(dense.shape, generator=gen, device=device) * dense
    return values.to(dtype).to_sparse_bsr((g, g)), dense
