"""Element masks inside partial key blocks (block-sparse attention): the kernel side of
``cute_kernels.masks``. ``apply_mask_mod`` sets -inf on the scores whose (query, key)
coordinate the mask hides; coordinates are absolute positions, top-left aligned
(FlexAttention's ``mask_mod``). The mask is a compile-time value: each kind traces its own
comparison; a custom mask traces the user's ``@cute.jit`` function. ``apply_packed_mask`` does
the same for key tiles packed from small listed blocks, whose columns are list positions."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32


@cute.jit
def visible(mask: cutlass.Constexpr, batch, head, q, kv, doc_ids) -> Boolean:
    """Whether query ``q`` may see key ``kv`` under ``mask`` (both inside the sequences)."""
    if cutlass.const_expr(mask.kind == "causal"):
        return q >= kv
    elif cutlass.const_expr(mask.kind == "sliding_window"):
        return q >= kv and q - kv < mask.size
    elif cutlass.const_expr(mask.kind == "prefix_lm"):
        return kv < mask.size or q >= kv
    elif cutlass.const_expr(mask.kind == "document"):
        return doc_ids[batch, q] == doc_ids[batch, kv]
    else:
        return Boolean(mask.fn(batch, head, q, kv))


@cute.jit
def hide_score(s_mn: cute.Tensor, r, c, hidden, select: cutlass.Constexpr = True):
    """``s_mn[r, c]`` = -inf where ``hidden``. ``select``: as a select (the Hopper kernels): a
    runtime ``if`` that stores into the fragment yields the whole fragment, which LLVM turns
    into a select chain quadratic in the row's scores (perf/RESULTS.md, "Masks as selects").
    Else that ``if``: the Ampere kernel, at its register limit, ran causal attention 17-20%
    slower with the selects (H100, same call)."""
    if cutlass.const_expr(select):
        s_mn[r, c] = cutlass.select_(hidden, -Float32.inf, s_mn[r, c])
    else:
        if hidden:
            s_mn[r, c] = -Float32.inf


@cute.jit
def apply_mask_mod(s_mn: cute.Tensor, c_mn: cute.Tensor, mask: cutlass.Constexpr, batch,
                   head, s_q, s_kv, doc_ids, select: cutlass.Constexpr = True):
    """-inf where ``mask`` hides the key; ``s_mn`` / ``c_mn``: the scores and their (query,
    key) coordinates as (row, col) views of one thread's fragment (``acc_mn_view``).
    Coordinates past the sequences (already -inf from ``apply_mask``) are clamped into them
    first, so a mask never reads out of bounds. ``select``: see ``hide_score``."""
    for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        q = cutlass.min(Int32(c_mn[r, 0][0]), s_q - 1)
        doc_q = Int32(0)
        if cutlass.const_expr(mask.kind == "document"):
            doc_q = doc_ids[batch, q]  # once per row, not per score
        for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
            kv = cutlass.min(Int32(c_mn[r, c][1]), s_kv - 1)
            if cutlass.const_expr(mask.kind == "document"):
                hidden = doc_ids[batch, kv] != doc_q
            else:
                hidden = not visible(mask, batch, head, q, kv, doc_ids)
            hide_score(s_mn, r, c, hidden, select)


@cute.jit
def apply_packed_mask(s_mn: cute.Tensor, c_mn: cute.Tensor, mask: cutlass.Constexpr,
                      entry_keys: cutlass.Constexpr, entries, masked, count, s_q, s_kv, batch,
                      head, doc_ids, select: cutlass.Constexpr = True):
    """-inf where the keys of a packed tile are hidden: column coordinates of ``c_mn`` are
    list positions, position ``p`` holding key ``E * entries[p // E] + p % E`` (E =
    ``entry_keys``; the block clamped into the keys as the loaders clamp it). Hidden are keys
    past ``s_kv`` (the residue block's tail, zero-filled or repeated rows in the stage) and,
    at positions ``< masked`` (the partial blocks, listed first), the keys ``mask`` hides.
    Positions past ``count`` are already -inf (``apply_mask``); the list is read at most at
    ``count - 1``. One list read per column, one doc id per row and column. ``select``: see
    ``hide_score``."""
    E = entry_keys
    last_block = (s_kv - 1) // E
    n_rows = cute.size(s_mn, mode=[0])
    q_rows = cute.make_rmem_tensor(n_rows, Int32)
    doc_q = cute.make_rmem_tensor(n_rows, Int32)
    for r in cutlass.range_constexpr(n_rows):
        q_rows[r] = cutlass.min(Int32(c_mn[r, 0][0]), s_q - 1)
        if cutlass.const_expr(mask.kind == "document"):
            doc_q[r] = doc_ids[batch, q_rows[r]]
    for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
        pos = Int32(c_mn[0, c][1])
        at = cutlass.min(pos, count - 1)
        block = cutlass.min(cutlass.max(entries[at // E], Int32(0)), last_block)
        kv = block * E + at % E
        past = kv >= s_kv
        partial = pos < masked
        kv = cutlass.min(kv, s_kv - 1)
        doc_kv = Int32(0)
        if cutlass.const_expr(mask.kind == "document"):
            doc_kv = doc_ids[batch, kv]
        for r in cutlass.range_constexpr(n_rows):
            hidden = past
            if cutlass.const_expr(mask.kind == "document"):
                hidden = hidden or (partial and doc_q[r] != doc_kv)
            else:
                hidden = hidden or (partial and not visible(mask, batch, head, q_rows[r], kv,
                                                            doc_ids))
            hide_score(s_mn, r, c, hidden, select)
