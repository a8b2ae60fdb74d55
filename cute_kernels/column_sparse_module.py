"""``ColumnSparseAttention``: the step schedule of Chipmunk Part III (docs/attention.md,
References) for one attention layer across diffusion steps (issue 14).

``cute_kernels.ColumnSparseAttention``; it drives :func:`cute_kernels.column_sparse_attention`,
:func:`cute_kernels.attention_colsum` and :func:`cute_kernels.topk_indices`.
docs/attention.md describes the op.
"""

from __future__ import annotations

import torch
from torch import nn

from .ops.attention import COLSUM_GROUPS, attention, attention_colsum
from .ops.bitpack import pack_mask, packed_width
from .ops.column_sparse import (
    CHUNK_ELEMENTS,
    _topk_sizes,
    column_indices,
    column_sparse_attention,
    topk_indices,
)
from .runtime.validate import check_int

__all__ = ["ColumnSparseAttention"]

#: The sparsity when neither ``sparsity`` nor ``k`` is given (Chipmunk Part III's 93%).
DEFAULT_SPARSITY = 0.93


class DenseStepSchedule:
    """Which diffusion steps are dense (the column-sparse modules' shared schedule):
    ``step < dense_steps``, or (``refresh_every`` given) a multiple of ``refresh_every``."""

    def _set_schedule(self, dense_steps: int, refresh_every: int | None) -> None:
        self.dense_steps = check_int("dense_steps", dense_steps, min_value=1)
        self.refresh_every = (None if refresh_every is None
                              else check_int("refresh_every", refresh_every, min_value=1))

    def is_dense(self, step: int) -> bool:
        """Whether ``step`` is a dense step: ``step < dense_steps`` or a multiple of
        ``refresh_every``.

        Args:
            step: a diffusion step, an int >= 0.

        Returns:
            True for a dense step, False for a sparse one.

        Raises:
            TypeError / ValueError: ``step`` not an int >= 0.
        """
        step = check_int("step", step, min_value=0)
        return step < self.dense_steps or (self.refresh_every is not None
                                           and step % self.refresh_every == 0)


class ColumnSparseAttention(DenseStepSchedule, nn.Module):
    """One attention layer's column-sparse deltas across diffusion steps (Chipmunk Part III,
    docs/attention.md References): dense steps pick the important key columns of each query
    group and cache the rest of the output; sparse steps recompute only those columns.

    **Schedule.** ``forward(q, k, v, step)`` is called once per diffusion step, with steps 0, 1,
    2, ... in order (step 0 starts a new sequence and drops the previous one's state). Step s
    is *dense* when ``s < dense_steps`` or (``refresh_every`` given) ``s % refresh_every ==
    0``, else *sparse* (the defaults, 2 and 10, are Chipmunk's: dense at 0, 1, 10, 20, ...).

    * A dense step returns the dense output ``o``. If the next step is sparse it also builds
      that step's state: ``o, lse, colsum = attention_colsum(q, k, v, prev_lse)`` with
      prev_lse the lse of the previous dense step (Chipmunk Part III's trick: an older step's
      softmax constants give every tile one scale); ``topk_indices(colsum, ...)`` picks the
      columns of each ``group`` of query rows; the cache is ``o_cache = o - csp(q, k, v)``,
      one :func:`column_sparse_attention` call that adds ``-1 * csp`` onto a copy of o
      (``accumulate=True, out_scale=-1.0``: one fp32 add, one rounding). When there is no
      previous dense step (``dense_steps=1``: the sequence's first step is followed by a
      sparse one) the step first runs ``attention(q, k, v, return_lse=True)`` for an lse of
      its own, i.e. a second dense pass on that one step. A dense step followed by another
      dense step runs ``attention`` only (its lse is kept for the next one's column sums).
    * A sparse step returns ``o_cache + csp(q, k, v)``: one :func:`column_sparse_attention`
      call with ``out=o_cache.clone(), accumulate=True`` (the cache stays for the next
      sparse steps). Right after a dense step with unchanged q/k/v this is the dense output
      (up to rounding); as q/k/v drift, the selected columns follow them and the others
      keep their dense-step contribution.

    **State and memory** (per layer, on the inputs' device; :meth:`state_bytes`): the cache
    (B, H, S_q, D) in q's dtype; the last dense lse (B, H, S_q) fp32; the selected columns as
    int32 index lists (B, H, G, L) with G = ceil(S_q / group) and L the columns kept per
    group (default), or with ``bitpacked_mask=True`` as a bitpacked mask (B, H, G,
    ceil(S_kv / 8)) uint8 (:func:`cute_kernels.pack_mask`), from which each sparse step
    rebuilds the lists (:func:`~cute_kernels.ops.column_sparse.column_indices`: an unpack and
    stream compaction over G x S_kv bits and one device sync per sparse step). The lists
    take 4 L bytes per group against S_kv / 8 for the mask, so the mask is the smaller one
    below ~97% sparsity (L > S_kv / 32). At HunyuanVideo's shape (B 1, H 24, S 118,784,
    D 128, group 192: G = 619) and 93% sparsity that is 494 MB of lists or 221 MB of mask
    (a bool mask: 1.76 GB), plus 730 MB of bf16 cache and 11 MB of lse. The lists are the
    default because a sparse step then reads them as they are; the mask trades that per-step
    rebuild for memory (``perf/column_sparse.py`` times both). A dense step that builds
    state also holds the (B, H, G, S_kv) fp32 column sums until the top-k is done (7.1 GB at
    that shape). Nothing is offloaded to host memory (Chipmunk pipelines masks and caches
    through pinned CPU buffers; not done here).

    **Forward only, inference.** The ops have no backward: inputs that require grad under grad
    mode raise ``NotImplementedError`` (run under ``torch.inference_mode()`` or
    ``torch.no_grad()``). No parameters; the state is plain attributes (not buffers), so
    ``state_dict`` is empty and ``.to()`` leaves it alone: start a new sequence after moving.
    """

    def __init__(self, *, group: int = 192, sparsity: float | None = None, k: int | None = None,
                 dense_steps: int = 2, refresh_every: int | None = 10, multiple_of: int = 1,
                 random_fraction: float = 0.0, bitpacked_mask: bool = False,
                 scale: float | None = None, generator: torch.Generator | None = None):
        """A column-sparse attention layer with an empty state.

        Args:
            group: query rows that share one list of key columns: 128 or 192 (default), the
                groups :func:`cute_kernels.attention_colsum` sums over.
            sparsity: the fraction of key columns each group drops, in [0, 1) (default 0.93
                when ``k`` is not given either); each group keeps ceil((1 - sparsity) S_kv).
            k: instead of ``sparsity``, the key columns each group keeps (int >= 1, at most
                S_kv: checked at the first dense step that picks columns).
            dense_steps: the first ``dense_steps`` steps are dense (int >= 1; default 2).
            refresh_every: also every step that is a multiple of this is dense, re-picking the
                columns and refreshing the cache (int >= 1; None: never after
                ``dense_steps``; default 10).
            multiple_of: round each group's column count up to a multiple of this (int >= 1;
                e.g. 64 or 128 for whole key tiles), taking the next-best columns.
            random_fraction: extra random columns per kept column (>= 0; default 0.0), as
                Chipmunk adds random keys.
            bitpacked_mask: keep the selection as a bitpacked mask and rebuild the index lists
                at every sparse step, instead of keeping the lists (class docstring, "State
                and memory").
            scale: the logits' factor (None: 1 / sqrt(D)), passed to every op.
            generator: the ``torch.Generator`` of :func:`~cute_kernels.ops.column_sparse.
                topk_indices` (its column sample and random columns), on the inputs' device;
                None uses torch's default.

        Raises:
            TypeError: an argument of the wrong type; both ``sparsity`` and ``k`` given.
            ValueError: ``group`` not 128/192, ``sparsity`` outside [0, 1), ``k``,
                ``dense_steps``, ``refresh_every`` or ``multiple_of`` < 1, a negative
                ``random_fraction``.
        """
        super().__init__()
        if isinstance(group, bool) or group not in COLSUM_GROUPS:
            raise ValueError(f"group must be one of {COLSUM_GROUPS} (the column-sum groups of "
                             f"attention_colsum), got {group!r}")
        if sparsity is None and k is None:
            sparsity = DEFAULT_SPARSITY
        # the index builder's own rules, against a large N (k <= S_kv waits for the inputs)
        _topk_sizes(1 << 62, k, sparsity, multiple_of, random_fraction)
        if not isinstance(bitpacked_mask, bool):
            raise TypeError(f"bitpacked_mask must be a bool, got {type(bitpacked_mask).__name__}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got "
                            f"{type(generator).__name__}")
        self.group = group
        self.sparsity, self.k = sparsity, k
        self._set_schedule(dense_steps, refresh_every)
        self.multiple_of, self.random_fraction = multiple_of, float(random_fraction)
        self.bitpacked_mask, self.scale, self.generator = bitpacked_mask, scale, generator
        self.reset()

    def reset(self) -> None:
        """Drop the state (a new sequence; step 0 does this by itself)."""
        self.last_step: int | None = None
        self._inputs: tuple | None = None  # shapes, dtype, device of the sequence
        self._lse: torch.Tensor | None = None  # the last dense step's lse
        self._o_cache: torch.Tensor | None = None
        self._indices: torch.Tensor | None = None
        self._counts: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None  # bitpacked selection (bitpacked_mask=True)
        self._s_kv = 0


    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                step: int) -> torch.Tensor:
        """This layer's attention output at diffusion step ``step`` (class docstring).

        Args:
            q: (B, H, S_q, D) queries, bfloat16 or float16, on a CUDA device
                (:func:`cute_kernels.attention`'s rules; non-causal).
            k: (B, H_kv, S_kv, D) keys, q's dtype.
            v: (B, H_kv, S_kv, D) values.
            step: the diffusion step, an int: 0 starts a new sequence (the state is dropped),
                then each call must pass the previous step + 1. Within a sequence q, k and v
                keep their shapes, dtype and device.

        Returns:
            o (B, H, S_q, D) in q's dtype, a new tensor: the dense attention on a dense
            step, ``o_cache + csp(q, k, v)`` on a sparse one.

        Raises:
            TypeError / ValueError: a ``step`` that is not an int >= 0, or not 0 or the
                previous step + 1; q/k/v whose shapes, dtype or device differ from the
                sequence's; the ops' argument errors (e.g. ``k`` > S_kv).
            NotImplementedError: inputs that require grad under grad mode (forward only).
        """
        step = check_int("step", step, min_value=0)
        if step == 0:
            self.reset()
        elif self.last_step is None or step != self.last_step + 1:
            before = ("no step yet (start with step 0)" if self.last_step is None
                      else f"step {self.last_step}")
            raise ValueError(f"ColumnSparseAttention: step {step} after {before}: steps go "
                             f"0, 1, 2, ... within a sequence (step 0 starts a new one; use "
                             f"one module per sequence, e.g. per classifier-free-guidance "
                             f"branch, that does not run through this layer in one batch)")
        inputs = (tuple(q.shape), tuple(k.shape), tuple(v.shape), q.dtype, q.device)
        if self._inputs is not None and inputs != self._inputs:
            raise ValueError(
                f"ColumnSparseAttention: step {step} got q {inputs[0]}, k {inputs[1]}, v "
                f"{inputs[2]} ({inputs[3]}, {inputs[4]}) but this sequence started with q "
                f"{self._inputs[0]}, k {self._inputs[1]}, v {self._inputs[2]} "
                f"({self._inputs[3]}, {self._inputs[4]}): the cached output and column lists "
                f"are for those shapes (B, H, S and D stay fixed within a sequence; start a new "
                f"one with step 0, or use one module per shape)")
        if self.is_dense(step):
            o = self._dense_step(q, k, v, build_state=not self.is_dense(step + 1))
        else:
            if self._o_cache is None:  # unreachable with consecutive steps from step 0
                raise RuntimeError("ColumnSparseAttention: a sparse step without a cache")
            indices, counts = self.index_lists()
            o = column_sparse_attention(q, k, v, indices, counts, group=self.group,
                                        scale=self.scale, out=self._o_cache.clone(),
                                        accumulate=True)
        self._inputs, self.last_step = inputs, step
        return o

    def _dense_step(self, q, k, v, build_state: bool) -> torch.Tensor:
        if not build_state:
            o, lse = attention(q, k, v, scale=self.scale, return_lse=True)
            self._lse = lse
            self._o_cache = self._indices = self._counts = self._mask = None
            return o
        prev_lse = self._lse
        if prev_lse is None:  # no earlier dense step: this step's own softmax constants
            prev_lse = attention(q, k, v, scale=self.scale, return_lse=True)[1]
        o, lse, colsum = attention_colsum(q, k, v, prev_lse, group=self.group, scale=self.scale)
        del prev_lse
        indices, counts = topk_indices(colsum, self.k, sparsity=self.sparsity,
                                       multiple_of=self.multiple_of,
                                       random_fraction=self.random_fraction,
                                       generator=self.generator)
        del colsum
        o_cache = column_sparse_attention(q, k, v, indices, counts, group=self.group,
                                          scale=self.scale, out=o.clone(), accumulate=True,
                                          out_scale=-1.0)
        self._lse, self._o_cache, self._s_kv = lse, o_cache, k.shape[2]
        if self.bitpacked_mask:
            self._mask = _pack_selection(indices, counts, k.shape[2])
            self._indices = self._counts = None
        else:
            self._indices, self._counts, self._mask = indices, counts, None
        return o

    def index_lists(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The current ``(indices, counts)`` (int32 (B, H, G, L) and (B, H, G)) the sparse
        steps use: the kept lists, or rebuilt from the bitpacked mask (the same lists: the
        selected columns in increasing order).

        Returns:
            ``(indices, counts)`` as :func:`~cute_kernels.ops.column_sparse.topk_indices`
            returned them at the last dense step that picked columns.

        Raises:
            RuntimeError: no columns are picked in this sequence yet (no dense step followed
                by a sparse one has run).
        """
        if self._mask is not None:
            return column_indices(self._mask, group=self.group, n=self._s_kv)
        if self._indices is None:
            raise RuntimeError("ColumnSparseAttention: no columns picked yet (the first dense "
                               "step followed by a sparse step picks them)")
        return self._indices, self._counts

    def state_bytes(self) -> dict[str, int]:
        """Device memory of the state, by part.

        Returns:
            ``{"indices": ..., "mask": ..., "o_cache": ..., "lse": ..., "total": ...}`` in
            bytes (0 for a part not held: ``indices`` counts the lists and counts,
            ``mask`` the bitpacked mask).
        """
        def size(*ts):
            return sum(t.numel() * t.element_size() for t in ts if t is not None)

        out = {"indices": size(self._indices, self._counts), "mask": size(self._mask),
               "o_cache": size(self._o_cache), "lse": size(self._lse)}
        out["total"] = sum(out.values())
        return out

    def extra_repr(self) -> str:
        keep = f"k={self.k}" if self.k is not None else f"sparsity={self.sparsity}"
        return (f"group={self.group}, {keep}, dense_steps={self.dense_steps}, "
                f"refresh_every={self.refresh_every}, multiple_of={self.multiple_of}, "
                f"random_fraction={self.random_fraction}, bitpacked_mask={self.bitpacked_mask}")


def _pack_selection(indices: torch.Tensor, counts: torch.Tensor, n: int) -> torch.Tensor:
    """The bitpacked mask (..., ceil(n / 8)) uint8 of index lists (..., L): bit j of a row set
    iff column j is among its first ``count`` entries. Rows in chunks of ~16M mask entries (a
    bool mask of the HunyuanVideo shape would be 1.76 GB at once)."""
    lead, length = indices.shape[:-1], indices.shape[-1]
    rows, row_counts = indices.reshape(-1, length), counts.reshape(-1, 1)
    out = torch.empty(rows.shape[0], packed_width(n), dtype=torch.uint8, device=indices.device)
    live_cols = torch.arange(length, device=indices.device)
    step = max(1, CHUNK_ELEMENTS // (n + 1))
    for start in range(0, rows.shape[0], step):
        stop = min(start + step, rows.shape[0])
        live = live_cols < row_counts[start:stop]
        # entries past the count go to a scratch column n, dropped before packing
        cols = torch.where(live, rows[start:stop], n).long()
        sel = torch.zeros(stop - start, n + 1, dtype=torch.bool, device=indices.device)
        sel.scatter_(1, cols, True)
        out[start:stop] = pack_mask(sel[:, :n].contiguous())
    return out.view(*lead, packed_width(n))
