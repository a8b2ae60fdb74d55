"""``bsr_sddmm`` / ``bsr_softmax`` / ``bsr_spmm``: block-sparse attention as three stages on
torch's ``sparse_bsr`` tensors (issue 15, the BCSR seed's kernels on the tensor cores).

    s = bsr_sddmm(q, k, layout, scale=None)   # scale * Q K^T at the layout's stored blocks
    p = bsr_softmax(s)                        # row softmax over the stored blocks only
    o = bsr_spmm(p, v)                        # dense (..., N, D)

``layout``: a ``torch.sparse_bsr_tensor`` of shape (*batch, N, N_kv) with square G x G blocks,
G in {16, 32, 64, 128}; only its sparsity pattern is read. Batch dims (at most two, e.g.
(B, H)) match q's leading dims, or the layout has none and is shared by every batch entry.
The outputs of ``bsr_sddmm`` / ``bsr_softmax`` are valid torch BSR tensors with the layout's
``crow_indices`` / ``col_indices`` (int32) and values in q's dtype (bf16 or fp16), so
``to_dense()``, ``torch.sparse`` ops and these functions all take them.

Exported as ``cute_kernels.bsr_*`` (kernels/bsr.py; GPU tests in tests/test_bsr_gpu.py,
float32 references in ``cute_kernels.reference.bsr_*``). Not custom ops: torch's custom-op
schema has no sparse outputs.
"""

from __future__ import annotations

import torch

from ..runtime.arch import sm_count
from ..runtime.bridge import kernel_for
from ..runtime.validate import check_cuda, check_same_device, check_tensor, value_checks

#: G, the block sizes the kernels take
BLOCKS = (16, 32, 64, 128)
HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16, torch.float16)
INDEX_DTYPE = torch.int32
#: the flattened batch is the kernels' grid y
MAX_GRID_Y = 65535
BSR_KERNELS = {"sddmm": "cute_kernels.kernels.bsr:BsrSddmm",
               "sddmm_chunks": "cute_kernels.kernels.bsr:BsrSddmmChunks",
               "spmm": "cute_kernels.kernels.bsr:BsrSpmm",
               "softmax": "cute_kernels.kernels.bsr:BsrSoftmax"}
#: Which SDDMM kernel ``bsr_sddmm`` runs: one CTA per stored block (False) or per chunk of
#: four stored blocks sharing their Q rows (True). perf/bsr.py on the H100 (N 32k, p 0.9 /
#: 0.95): the per-block kernel by 5-35% at every G (the chunks win only at p 0.99, by up
#: to 22%)
SDDMM_CHUNKED = False
#: Whether SpMM launches the longest block rows first when its grid exceeds a wave (the
#: seed's static balancing by row weight). Off: at one head (G 128, N 32k, 1.9 waves) the
#: sort made the kernel 68 -> 55 us but cost more in its own launches (the op 0.130 against
#: 0.082 ms, perf/bsr_breakdown.py on the H100)
SPMM_LONGEST_FIRST = False


class Pattern:
    """A BSR sparsity pattern flattened over its batch: int32 ``crow`` (Bt, M + 1), ``col``
    (Bt, nnz); ``batch`` the leading dims, ``size`` (N, N_kv), ``block`` G. ``source``: the
    torch BSR tensor it came from (derived lists are cached on it) or None."""

    def __init__(self, crow, col, batch, size, block, source=None):
        self.crow, self.col, self.batch, self.size, self.block = crow, col, batch, size, block
        self.source = source

    @property
    def flat(self) -> int:
        return self.crow.shape[0]

    def rows_of_entries(self) -> torch.Tensor:
        """(Bt, nnz) int32: each stored block's block row (no sync). Cached on the source
        tensor, keyed by its index tensors' storage and version counters (an in-place edit
        of them recomputes it): a layout reused across calls, heads or layers pays the
        search (six small launches) once."""
        source = self.source
        key = None
        if source is not None:
            crow_t, col_t = source.crow_indices(), source.col_indices()
            key = (crow_t.data_ptr(), crow_t._version, col_t.data_ptr(), col_t._version,
                   self.flat, self.crow.device)
            cached = source.__dict__.get("_cute_kernels_rows")
            if cached is not None and cached[0] == key:
                return cached[1]
        nnz = self.col.shape[1]
        ids = torch.arange(nnz, device=self.col.device, dtype=INDEX_DTYPE).expand(self.flat, nnz)
        rows = (torch.searchsorted(self.crow, ids.contiguous(), right=True) - 1).to(INDEX_DTYPE)
        if key is not None:
            source.__dict__["_cute_kernels_rows"] = (key, rows)
        return rows

    def row_order(self) -> torch.Tensor:
        """(Bt, M) int32: block rows by stored blocks, longest first (ties in index order):
        the launch order that keeps the last wave short (no sync)."""
        lengths = self.crow[:, 1:] - self.crow[:, :-1]
        return torch.argsort(lengths, dim=-1, descending=True, stable=True).to(INDEX_DTYPE)

    def spmm_order(self, head_dim: int) -> torch.Tensor:
        """SpMM's launch order: with ``SPMM_LONGEST_FIRST``, longest block rows first when
        the grid (one CTA per block row) takes more than one wave of resident CTAs, so the
        last wave is short; else the rows in index order (within one wave all run at once and
        the sort, ~16 us of device time and a few launches, would buy nothing)."""
        g, device = self.block, self.crow.device
        rows = self.flat * (self.size[0] // g)
        if SPMM_LONGEST_FIRST:
            smem = 2 * (g * g + g * head_dim) * 2  # kernels/bsr.py BsrSpmm: 2 stages of P, V
            threads = 32 * min(4, g // 16)
            per_sm = min(torch.cuda.get_device_properties(device)
                         .shared_memory_per_multiprocessor // smem, 2048 // threads, 32)
            if rows > per_sm * sm_count(device):
                return self.row_order()
        return _identity_order(self.flat, self.size[0] // g, device)

    def to_bsr(self, values: torch.Tensor) -> torch.Tensor:
        """A torch BSR tensor of this pattern holding ``values`` (Bt, nnz, G, G)."""
        g = self.block
        return torch.sparse_bsr_tensor(
            self.crow.view(*self.batch, self.crow.shape[-1]),
            self.col.view(*self.batch, self.col.shape[-1]),
            values.view(*self.batch, self.col.shape[-1], g, g), size=(*self.batch, *self.size),
            check_invariants=False)

    def check_values(self) -> None:
        """Debug mode (a device sync): row pointers start at 0, never decrease and end at nnz;
        block columns lie in [0, N_kv / G)."""
        crow, col, nnz = self.crow, self.col, self.col.shape[1]
        bad = []
        if bool((crow[:, 0] != 0).any()) or bool((crow[:, -1] != nnz).any()):
            bad.append(f"crow_indices must start at 0 and end at nnz = {nnz}")
        if bool((crow[:, 1:] < crow[:, :-1]).any()):
            bad.append("crow_indices must not decrease")
        if col.numel() and (int(col.min()) < 0 or int(col.max()) >= self.size[1] // self.block):
            bad.append(f"col_indices must lie in [0, N_kv / G = {self.size[1] // self.block})")
        if bad:
            raise ValueError("; ".join(bad))


_IDENTITY: dict[tuple, torch.Tensor] = {}


def _identity_order(flat: int, m: int, device) -> torch.Tensor:
    """(flat, M) int32 rows 0..M-1 per batch entry (cached per shape and device: read-only)."""
    key = (flat, m, device)
    if key not in _IDENTITY:
        if len(_IDENTITY) > 64:
            _IDENTITY.clear()
        _IDENTITY[key] = torch.arange(m, dtype=INDEX_DTYPE, device=device).repeat(flat, 1)
    return _IDENTITY[key]


def bsr_pattern(name: str, t: object, batch: tuple[int, ...] | None = None) -> Pattern:
    """Check ``t`` is a square-block BSR tensor the kernels take and flatten its pattern,
    broadcast over ``batch`` when it has no batch dims of its own."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.sparse_bsr:
        raise TypeError(f"{name} must be a torch.sparse_bsr tensor, got "
                        f"{type(t).__name__ if not isinstance(t, torch.Tensor) else t.layout}")
    g_rows, g_cols = t.values().shape[-2:]
    if g_rows != g_cols or g_rows not in BLOCKS:
        raise ValueError(f"{name} must have square blocks of {BLOCKS}, got {g_rows} x {g_cols}")
    if t.dim() - 2 > 2 or t.dense_dim() != 0:
        raise ValueError(f"{name} must be (*batch, N, N_kv) with at most two batch dims and no "
                         f"dense dims, got shape {tuple(t.shape)}")
    n, n_kv = t.shape[-2:]
    crow_t, col_t = t.crow_indices(), t.col_indices()
    # shapes only (no sync): torch builds BSR tensors with check_invariants=False that break
    # these, and the kernels size their grids and writes by them
    if n % g_rows or n_kv % g_rows:
        raise ValueError(f"{name}'s size ({n}, {n_kv}) must be multiples of its block {g_rows}")
    if crow_t.shape[-1] != n // g_rows + 1 or col_t.shape[-1] != t.values().shape[-3]:
        raise ValueError(f"{name} is not a consistent BSR tensor: crow_indices needs N / G + 1 "
                         f"= {n // g_rows + 1} entries (has {crow_t.shape[-1]}) and "
                         f"col_indices one per stored block ({t.values().shape[-3]}, has "
                         f"{col_t.shape[-1]})")
    if col_t.shape[-1] and not n_kv:
        raise ValueError(f"{name} stores blocks but has no columns")
    own = tuple(t.shape[:-2])
    if batch is not None and own not in ((), batch):
        raise ValueError(f"{name} has batch dims {own}, but the dense operands have {batch} "
                         f"(they must match, or {name} has none)")
    batch = own if batch is None else batch
    crow = crow_t.to(INDEX_DTYPE).reshape(-1, crow_t.shape[-1])
    col = col_t.to(INDEX_DTYPE).reshape(-1, col_t.shape[-1])
    flat = 1
    for size in batch:
        flat *= size
    if not 0 < flat <= MAX_GRID_Y:
        raise ValueError(f"the batch dims {batch} must hold 1 to {MAX_GRID_Y} entries (the "
                         f"kernels' grid y), got {flat}")
    if crow.shape[0] != flat:  # a shared layout: one pattern for every batch entry
        crow, col = crow.expand(flat, -1), col.expand(flat, -1)
    return Pattern(crow.contiguous(), col.contiguous(), batch, tuple(t.shape[-2:]), g_rows,
                   source=t)


def _operand(name: str, t: object, batch, rows: int | None, block: int) -> torch.Tensor:
    """A dense (*batch, rows, D) operand as (Bt, rows, D) with a unit-stride D and 16-byte
    rows (copied when it is not)."""
    check_tensor(name, t, dtypes=DTYPES, min_ndim=2, on_cuda=False)
    if t.dim() - 2 != len(batch) or tuple(t.shape[:-2]) != tuple(batch):
        raise ValueError(f"{name} must be (*batch, rows, D) with batch {tuple(batch)}, got "
                         f"{tuple(t.shape)}")
    if rows is not None and t.shape[-2] != rows:
        raise ValueError(f"{name} must have {rows} rows, got {t.shape[-2]}")
    if t.shape[-2] % block:
        raise ValueError(f"{name}'s rows ({t.shape[-2]}) must be a multiple of the block {block}")
    if t.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"{name}'s last dim must be one of {HEAD_DIMS}, got {t.shape[-1]}")
    flat = t.reshape(-1, *t.shape[-2:])
    if (flat.stride(-1) != 1 or any(s % 8 for s in flat.stride()[:-1])
            or flat.data_ptr() % 16):
        flat = flat.contiguous()
    return flat


def _check_scale(scale, d: int) -> float:
    if scale is None:
        return d ** -0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not (scale == scale and abs(scale) != float("inf")):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def bsr_sddmm(q: torch.Tensor, k: torch.Tensor, layout: torch.Tensor, *,
              scale: float | None = None, validate: bool | None = None) -> torch.Tensor:
    """Sampled dense-dense matmul: ``scale * q k^T`` at the stored blocks of ``layout`` only.

    Args:
        q: (*batch, N, D) bf16/fp16, D 64 or 128, N a multiple of G; any strides (copied
            when the rows are not 16-byte aligned with a unit-stride D).
        k: (*batch, N_kv, D), q's dtype and device.
        layout: a ``torch.sparse_bsr_tensor`` (*batch or no batch, N, N_kv) with G x G blocks,
            G in {16, 32, 64, 128}; its values are ignored.
        scale: the factor (default 1 / sqrt(D)).
        validate: check the layout's indices (a device sync; default
            ``CUTE_KERNELS_VALIDATE``). Without it, bad indices give wrong numbers, never an
            out-of-bounds access.

    Returns:
        A BSR tensor (*batch, N, N_kv) with the layout's pattern (int32 indices) and q's dtype.

    Raises:
        TypeError: a non-BSR layout, q/k not bf16/fp16 tensors, a non-float scale.
        ValueError: non-square or unsupported blocks, a BSR tensor whose index shapes do not
            fit its size, mismatched shapes or batch dims (or 0 / more than 65,535 batch
            entries), D not 64/128, a non-finite scale, bad indices (``validate``).
    """
    pattern = bsr_pattern("layout", layout, tuple(q.shape[:-2]) if isinstance(
        q, torch.Tensor) else None)
    g = pattern.block
    q_flat = _operand("q", q, pattern.batch, pattern.size[0], g)
    k_flat = _operand("k", k, pattern.batch, pattern.size[1], g)
    if k.dtype != q.dtype or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must match q's dtype and D, got {k.dtype} / {k.shape[-1]} for "
                         f"{q.dtype} / {q.shape[-1]}")
    scale = _check_scale(scale, q.shape[-1])
    for name, t in (("q", q), ("k", k)):
        check_cuda(name, t)
    check_same_device(q=q, k=k, layout=pattern.crow)
    if value_checks(validate):
        pattern.check_values()
    return pattern.to_bsr(_sddmm(q_flat, k_flat, pattern, scale, SDDMM_CHUNKED))


def _sddmm(q_flat, k_flat, pattern: Pattern, scale: float, chunked: bool) -> torch.Tensor:
    """The SDDMM kernel's stored values (Bt, nnz, G, G), by stored block or by chunk."""
    g, nnz, d = pattern.block, pattern.col.shape[1], q_flat.shape[-1]
    values = torch.empty(pattern.flat, nnz, g, g, dtype=q_flat.dtype, device=q_flat.device)
    if nnz and pattern.flat and chunked:  # rows found in the kernel: no per-block row list
        _launch("sddmm_chunks", q_flat.device, (q_flat.dtype, g, d), mQ=q_flat, mK=k_flat,
                mCrow=pattern.crow, mCols=pattern.col, mOut=values, scale=scale,
                steps=max(1, (pattern.crow.shape[1] - 1).bit_length()))
    elif nnz and pattern.flat:
        _launch("sddmm", q_flat.device, (q_flat.dtype, g, d), mQ=q_flat, mK=k_flat,
                mRows=pattern.rows_of_entries(), mCols=pattern.col, mOut=values, scale=scale)
    return values


def bsr_softmax(s: torch.Tensor, *, validate: bool | None = None) -> torch.Tensor:
    """Row softmax of a BSR matrix over its stored blocks only (absent blocks are -inf).

    Args:
        s: a ``torch.sparse_bsr_tensor`` (*batch, N, N_kv), square G x G blocks of
            {16, 32, 64, 128}, bf16/fp16 values, on a CUDA device.
        validate: check the indices (a device sync; default ``CUTE_KERNELS_VALIDATE``).

    Returns:
        A BSR tensor with s's pattern: each scalar row's stored values softmax-normalised in
        fp32 and rounded to s's dtype (a row with no stored block stores nothing).

    Raises:
        TypeError: ``s`` not a BSR tensor, values not bf16/fp16.
        ValueError: unsupported blocks or batch dims (or 0 / more than 65,535 batch entries),
            a BSR tensor whose index shapes do not fit its size, bad indices (``validate``).
    """
    pattern = bsr_pattern("s", s)
    values = s.values()
    if values.dtype not in DTYPES:
        raise TypeError(f"s's values must be bfloat16 or float16, got {values.dtype}")
    check_cuda("s", values)
    if value_checks(validate):
        pattern.check_values()
    g = pattern.block
    vals = values.reshape(pattern.flat, -1, g, g)
    if not vals.is_contiguous() or vals.data_ptr() % 16:
        vals = vals.contiguous()
    out = torch.empty_like(vals)
    if vals.shape[1] and pattern.flat:
        _launch("softmax", vals.device, (vals.dtype, g), mVals=vals, mCrow=pattern.crow,
                mOut=out)
    return pattern.to_bsr(out)


def bsr_spmm(p: torch.Tensor, v: torch.Tensor, *, validate: bool | None = None) -> torch.Tensor:
    """Sparse-dense matmul ``p @ v`` of a BSR matrix and a dense one.

    Args:
        p: a ``torch.sparse_bsr_tensor`` (*batch, N, N_kv), square G x G blocks of
            {16, 32, 64, 128}, values in v's dtype.
        v: (*batch, N_kv, D) bf16/fp16, D 64 or 128, on p's device; any strides (copied when
            the rows are not 16-byte aligned with a unit-stride D).
        validate: check p's indices (a device sync; default ``CUTE_KERNELS_VALIDATE``).

    Returns:
        (*batch, N, D) in v's dtype, fp32 accumulation; rows of block rows with no stored
        block are zeros.

    Raises:
        TypeError: ``p`` not a BSR tensor, dtypes not bf16/fp16 or not matching.
        ValueError: unsupported blocks, a BSR tensor whose index shapes do not fit its size,
            mismatched shapes or batch dims (or 0 / more than 65,535 batch entries), D not
            64/128, bad indices (``validate``).
    """
    pattern = bsr_pattern("p", p)
    g = pattern.block
    v_flat = _operand("v", v, pattern.batch, pattern.size[1], g)
    values = p.values()
    if values.dtype != v.dtype:
        raise TypeError(f"p's values ({values.dtype}) and v ({v.dtype}) must share a dtype")
    check_cuda("v", v)
    check_same_device(p=values, v=v)
    if value_checks(validate):
        pattern.check_values()
    d = v.shape[-1]
    vals = values.reshape(pattern.flat, -1, g, g)
    if not vals.is_contiguous() or vals.data_ptr() % 16:
        vals = vals.contiguous()
    out = torch.empty(pattern.flat, pattern.size[0], d, dtype=v.dtype, device=v.device)
    if pattern.flat and pattern.size[0]:
        if vals.shape[1]:
            _launch("spmm", v.device, (v.dtype, g, d), mP=vals, mCrow=pattern.crow,
                    mCols=pattern.col, mOrder=pattern.spmm_order(d), mV=v_flat, mOut=out)
        else:
            out.zero_()
    return out.view(*pattern.batch, pattern.size[0], d)


def make_build(op: str, dtype: torch.dtype, block: int, head_dim: int | None = None):
    """The kernel object and symbolic arguments of one BSR stage (arch-independent)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

    from ..kernels import bsr
    from ..runtime.bridge import cutlass_dtype, fake_compact, sym
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    dt = cutlass_dtype(dtype)

    def dense(rows_multiple: int):
        return make_fake_tensor(dt, (sym(), sym(rows_multiple), head_dim),
                                (sym(8), sym(8), 1), assumed_align=16)

    def blocks():
        return make_fake_compact_tensor(dt, (sym(), sym(), block, block),
                                        stride_order=(3, 2, 1, 0), assumed_align=16)

    def index(rank: int = 2):
        return fake_compact(INDEX_DTYPE, rank)

    if op == "sddmm":
        kernel = bsr.BsrSddmm(block, head_dim)
        named = dict(mQ=dense(block), mK=dense(block), mRows=index(), mCols=index(),
                     mOut=blocks(), scale=cutlass.Float32(1.0))
    elif op == "sddmm_chunks":
        kernel = bsr.BsrSddmmChunks(block, head_dim)
        named = dict(mQ=dense(block), mK=dense(block), mCrow=index(), mCols=index(),
                     mOut=blocks(), scale=cutlass.Float32(1.0), steps=cutlass.Int32(1))
    elif op == "spmm":
        kernel = bsr.BsrSpmm(block, head_dim)
        out = make_fake_compact_tensor(dt, (sym(), sym(block), head_dim),
                                       stride_order=(2, 1, 0), assumed_align=16)
        named = dict(mP=blocks(), mCrow=index(), mCols=index(), mOrder=index(),
                     mV=dense(block), mOut=out)
    elif op == "softmax":
        kernel = bsr.BsrSoftmax(block)
        named = dict(mVals=blocks(), mCrow=index(), mOut=blocks())
    else:
        raise ValueError(f"unknown BSR op {op!r}")
    return Build(kernel, launch_args(kernel, **named))


def _launch(op: str, device, key: tuple, **named) -> None:
    from ..runtime.launch import kernel_params

    kernel = kernel_for(device, (f"bsr_{op}", *key),
                        lambda path, target: make_build(op, *key))
    kernel(*kernel_params(BSR_KERNELS[op]).call_args(**named))


def bsr_sddmm_reference(q, k, layout, *, scale: float | None = None) -> torch.Tensor:
    """:func:`bsr_sddmm` in float32 (plain torch, any device): a BSR tensor of fp32 values."""
    pattern = bsr_pattern("layout", layout, tuple(q.shape[:-2]))
    g = pattern.block
    scale = _check_scale(scale, q.shape[-1])
    qf = q.float().reshape(pattern.flat, -1, q.shape[-1])
    kf = k.float().reshape(pattern.flat, -1, k.shape[-1])
    rows, cols = pattern.rows_of_entries().long(), pattern.col.long()
    q_blocks = qf.view(pattern.flat, -1, g, qf.shape[-1])  # (Bt, M, G, D)
    k_blocks = kf.view(pattern.flat, -1, g, kf.shape[-1])
    bt = torch.arange(pattern.flat, device=qf.device).unsqueeze(-1)
    values = scale * q_blocks[bt, rows] @ k_blocks[bt, cols].transpose(-1, -2)
    return pattern.to_bsr(values)


def bsr_softmax_reference(s) -> torch.Tensor:
    """:func:`bsr_softmax` in float32: the dense row softmax with absent blocks at -inf
    (rows with no stored block keep nothing)."""
    pattern = bsr_pattern("s", s)
    g = pattern.block
    vals = s.values().float().reshape(pattern.flat, -1, g, g)
    rows = pattern.rows_of_entries().long()
    m = pattern.size[0] // g
    out = torch.empty_like(vals)
    for b in range(pattern.flat):
        for r in range(m):
            sel = (rows[b] == r).nonzero().flatten()
            if sel.numel():
                block_row = vals[b, sel].permute(1, 0, 2).reshape(g, -1)  # (G, n G)
                out[b, sel] = torch.softmax(block_row, -1).view(g, -1, g).permute(1, 0, 2)
    return pattern.to_bsr(out)


def bsr_spmm_reference(p, v) -> torch.Tensor:
    """:func:`bsr_spmm` in float32: ``p.to_dense() @ v`` without materialising p."""
    pattern = bsr_pattern("p", p)
    g = pattern.block
    vals = p.values().float().reshape(pattern.flat, -1, g, g)
    vf = v.float().reshape(pattern.flat, -1, v.shape[-1])
    v_blocks = vf.view(pattern.flat, -1, g, vf.shape[-1])
    bt = torch.arange(pattern.flat, device=vf.device).unsqueeze(-1)
    contrib = vals @ v_blocks[bt, pattern.col.long()]  # (Bt, nnz, G, D)
    rows = pattern.rows_of_entries().long()
    out = torch.zeros(pattern.flat, pattern.size[0] // g, g, vf.shape[-1], device=vf.device)
    out.index_put_((bt.expand_as(rows), rows), contrib, accumulate=True)
    return out.view(*pattern.batch, pattern.size[0], vf.shape[-1])
