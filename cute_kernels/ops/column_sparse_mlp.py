"""The column-sparse MLP delta (issue 16, Chipmunk Part III's second half): the contract, its
validation and its float32 reference, ahead of the kernels.

A diffusion transformer's MLP ``y = act(x W1^T + b1) W2^T + b2`` changes little between steps,
so a sparse step recomputes, per group of ``group`` token rows, only the intermediate columns
``indices[g, :counts[g]]`` and adds their change to the cached output:

    h       = act(x_g W1[idx]^T + b1[idx])                 (group, c)
    delta   = h - act_cache[g rows, idx]
    act_cache[g rows, idx]  = h                             (the cache writeback)
    out_cache[g rows]      += delta W2[:, idx]^T            (mm2 on the packed delta)

``column_sparse_mlp_reference`` computes that in float32 for every group at once (one
gather, two batched matmuls) and returns the new caches; ``scatter_add_reference`` is the
writeback alone (``dest[g rows, idx] += src[g rows, :c]``). Both are public as
``cute_kernels.reference.column_sparse_mlp`` / ``scatter_add``.

``column_sparse_mlp`` runs the step on the GPU with two kernels (kernels/mlp_delta.py): mm1
with the W1 rows gathered and the cache epilogue fused, then mm2 with the W2 columns gathered
along K, accumulated into ``out_cache``. ``scatter_add`` is the writeback as its own op
(kernels/scatter_add.py).
"""

from __future__ import annotations

import torch

from ..runtime.arch import confining_grid, device_sm_count, device_target, sm_count
from ..runtime.bridge import kernel_for
from ..runtime.validate import check_cuda, check_int, check_tensor, value_checks
from .activations import ACTIVATION_FNS, GATED_ACTIVATIONS, GATED_TO_ACT, check_activation
from .column_sparse import INDEX_DTYPE, check_group
from .dispatch import is_meta

#: activations of the fused mm1 epilogue (DiT MLPs use gelu_tanh)
MLP_ACTIVATIONS = ("gelu_tanh", "gelu", "silu")
#: the gated forms (Llama-style ``act(gate) * up``): w1 / b1 are then the interleaved
#: ``pack_gated_weight`` rows (2F, K) / (2F,), up even, gate odd
MLP_GATED = GATED_ACTIVATIONS
DTYPES = (torch.bfloat16, torch.float16)
MLP_KERNELS = {"up": "cute_kernels.kernels.mlp_delta:MlpDeltaUp",
               "down": "cute_kernels.kernels.mlp_delta:MlpDeltaDown",
               "up_sm90": "cute_kernels.kernels.mlp_delta_sm90:MlpDeltaUpSm90",
               "down_sm90": "cute_kernels.kernels.mlp_delta_sm90:MlpDeltaDownSm90",
               "scatter": "cute_kernels.kernels.scatter_add:ScatterAdd"}
#: Whether the Hopper path runs mm1 / mm2 as the warp-specialized WGMMA kernels
#: (kernels/mlp_delta_sm90.py) where they apply (group 128; mm1 K % 64 == 0, mm2 D % 128 ==
#: 0); else the mma.sync kernels. perf/mlp_delta_tuning.py on an H200 at HunyuanVideo's MLP
#: (p 0.93, ms): mm1 WGMMA 2.22 against mma.sync 2.07 while its producer warpgroup, gathering
#: 16 KiB per k-tile with 16-byte cp.async, computed every address from a staged index
#: (issue-bound, as the attention gather was); with staged addresses (below) 1.928 against
#: mma.sync's 2.128 (2026-11-27; an H100: 2.182 against 2.161); with the epilogue warpgroup
#: (below) H200 1.789 against 2.140, H100 1.930-1.933 against 2.147-2.178; mm2 WGMMA 1.99
#: against 2.33
SM90_UP_ON = True
#: Whether that mm1 stages each gathered row's 64-bit address (the attention gather's staged
#: addresses, the swizzle's XOR hoisted) instead of its index: 1.928 against 2.184 ms (H200)
SM90_UP_ADDRESSES = True
#: Whether the gated forms take that WGMMA mm1 too (64 features a tile, gated in registers):
#: SwiGLU at the same shape, ms, with the epilogue warpgroup: H200 3.658 against mma.sync's
#: 4.028; H100 4.012-4.024 against 3.913-4.080 (on a par there)
SM90_UP_GATED = True
#: Whether that mm1 hands each unit's staged tile to a fourth (epilogue) warpgroup, which runs
#: the cache pass and the delta store while the consumers run the next unit's mainloop:
#: 1.789 against 1.995 ms (H200), 1.930 against 2.182 (H100)
SM90_UP_EPILOGUE_WG = True
SM90_DOWN_ON = True
#: Whether the Hopper mm1 / mm2 stage their epilogue tile in the operands' 16-bit type
#: instead of fp32 (h as the act_cache keeps it; mm2's sum rounded once more), which frees
#: the smem for a fifth k-tile stage (``mlp_delta_sm90.NARROW_STAGES``)
SM90_NARROW_STAGING = True
#: k-tiles of mm2's list the Hopper kernel stages per index round trip (0: one k-tile, fetched
#: one ahead)
SM90_DOWN_CHUNK = 16
#: the kernels' (rows, columns, k) tile: rows a divisor of the group, columns the packed width
#: one mm1 CTA covers (the packed delta is padded to a multiple of it)
TILE_N, TILE_K = 128, 64
#: mm1's and mm2's tiles, stages and warps and mm1's cache-pass batch, by
#: perf/mlp_delta_tuning.py on the H100 at HunyuanVideo's MLP (M 118,784, p 0.93; ms): mm1
#: k 32 / 4 stages 2.16-2.22 (k 64 / 3 stages 2.27, batch 16 2.37, 8 warps 2.80-2.93); mm2
#: 64-wide tiles 2.35-2.38 (128-wide 2.65-2.71, 8 warps 2.72-3.78)
UP_CONFIG = {"tile_k": 32, "stages": 4, "cache_batch": 64, "warps": (2, 2)}
DOWN_CONFIG = {"tile_n": 64, "tile_k": TILE_K, "stages": 3, "warps": (2, 2)}
#: How scatter_add's bulk path adds its transposed tiles into an M-major cache: "bulk"
#: (``cp.reduce.async.bulk``), "red" (the threads' vector ``red.global.add.v4``), "rmw" (16-byte
#: loads, add, stores) or None (default, ``scatter_adder``): rmw with the whole GPU and a
#: 16-byte aligned source, else bulk (perf/column_sparse_mlp.py on an H100: rmw 0.244 ms
#: against bulk's 0.282 on all SMs, 0.266 against 0.273 once bulk's one-CTA-per-tile launches
#: took one buffer (``SCATTER_ONE_BUFFER``); on 8 side SMs of an SmPartition bulk moves 355 GB/s
#: against rmw's 291, whose 134 registers allow 3 CTAs per SM; with scalar source loads rmw
#: needs 255). An M-major source takes its own bulk route unless this forces red or rmw
SCATTER_ADDER = None
#: Whether scatter_add launches of one CTA per tile take one transposed-tile buffer (17 KiB
#: of smem, 9 CTAs per SM by registers) instead of two (34 KiB, 6 per SM). H200, bulk, ms one
#: / two: on 8 green side SMs 1.315-1.328 / 1.726-1.760 (467 / 355 GB/s), on 6 fine-grained
#: ones 1.758 / 2.415, on all SMs 0.204-0.205 / 0.217 (perf/RESULTS.md)
SCATTER_ONE_BUFFER = True

#: groups are the kernels' grid z
MAX_GROUPS = 65535


def _check_lists(indices, counts, groups: int, columns: int) -> None:
    check_tensor("indices", indices, dtypes=(INDEX_DTYPE,), ndim=2, on_cuda=False)
    check_tensor("counts", counts, dtypes=(INDEX_DTYPE,), ndim=1, on_cuda=False)
    if indices.shape[0] != groups or counts.shape[0] != groups or indices.shape[1] < 1:
        raise ValueError(f"indices must be (ceil(M / group) = {groups}, L >= 1) and counts "
                         f"({groups},), got {tuple(indices.shape)} and {tuple(counts.shape)}")
    if indices.shape[1] > columns:
        raise ValueError(f"indices has {indices.shape[1]} columns per group, more than the "
                         f"{columns} intermediate columns")


def validate_column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group,
                               activation, dtypes=DTYPES) -> None:
    """The shape, dtype and device rules of :func:`column_sparse_mlp_reference` (and of the
    op to come): x (M, K); w1 (F, K) and b1 (F,) or None (``nn.Linear`` storage); w2 (D, F);
    indices int32 (ceil(M / group), L) and counts int32 (ceil(M / group)); act_cache (M, F),
    out_cache (M, D); one dtype of ``dtypes`` (the kernels': bf16 / fp16; the reference also
    takes float32) and one device for the floating tensors."""
    check_group(group)
    check_activation("activation", activation, MLP_ACTIVATIONS + MLP_GATED)
    check_tensor("x", x, dtypes=dtypes, ndim=2, on_cuda=False)
    m, k = x.shape
    for name, t, ndim in (("w1", w1, 2), ("w2", w2, 2), ("act_cache", act_cache, 2),
                          ("out_cache", out_cache, 2)):
        check_tensor(name, t, dtypes=dtypes, ndim=ndim, on_cuda=False)
        if t.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {t.dtype}")
    gated = activation in MLP_GATED
    f = w1.shape[0] // 2 if gated else w1.shape[0]
    if w1.shape[1] != k or (gated and w1.shape[0] % 2):
        raise ValueError(f"w1 must be ({'2F' if gated else 'F'}, K = {k})"
                         f"{' (pack_gated_weight rows: up even, gate odd)' if gated else ''}, "
                         f"got {tuple(w1.shape)}")
    if w2.shape[1] != f:
        raise ValueError(f"w2 must be (D, F = {f}), got {tuple(w2.shape)}"
                         + (f" (the gated {activation} takes w1 as 2F = {w1.shape[0]} "
                            f"interleaved (up, gate) rows: pack_gated_weight)" if gated else ""))
    if b1 is not None:
        check_tensor("b1", b1, dtypes=dtypes, ndim=1, on_cuda=False)
        if b1.shape[0] != w1.shape[0] or b1.dtype != x.dtype:
            raise ValueError(f"b1 must be ({w1.shape[0]},) in x's dtype (w1's rows), got "
                             f"{tuple(b1.shape)} {b1.dtype}")
    if act_cache.shape != (m, f):
        raise ValueError(f"act_cache must be (M, F) = ({m}, {f}), got "
                         f"{tuple(act_cache.shape)}")
    if out_cache.shape != (m, w2.shape[0]):
        raise ValueError(f"out_cache must be (M, D) = ({m}, {w2.shape[0]}), got "
                         f"{tuple(out_cache.shape)}")
    _check_lists(indices, counts, -(-m // group), f)
    devices = {t.device for t in (x, w1, w2, indices, counts, act_cache, out_cache)
               if t is not None} | ({b1.device} if b1 is not None else set())
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")


def _live(indices, counts):
    """(B, L) bool: list positions below each group's count (counts clamped into [0, L])."""
    width = indices.shape[1]
    return (torch.arange(width, device=indices.device)
            < counts.long().clamp(0, width).unsqueeze(-1))


def _grouped(t: torch.Tensor, group: int) -> torch.Tensor:
    """(M, ...) -> (G, group, ...) float32, rows past M zero."""
    m = t.shape[0]
    pad = -m % group
    t = t.float()
    if pad:
        t = torch.cat([t, t.new_zeros(pad, *t.shape[1:])])
    return t.view(-1, group, *t.shape[1:])


def column_sparse_mlp_reference(x, w1, b1, w2, indices, counts, act_cache, out_cache, *,
                                group: int = 128, activation: str = "gelu_tanh"):
    """One sparse step of the MLP delta in float32 (module docstring): returns the updated
    ``(out_cache, act_cache)`` as new float32 tensors (M, D) and (M, F); the inputs are not
    modified. Only positions below each group's count are used; indices there must lie in
    [0, F) and be distinct within a group (a repeated column would be added twice)."""
    validate_column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group,
                               activation, dtypes=(*DTYPES, torch.float32))
    m = x.shape[0]
    idx = indices.long().clamp(0, w2.shape[1] - 1)
    live = _live(indices, counts).float().unsqueeze(1)  # (G, 1, L)
    x_g = _grouped(x, group)  # (G, group, K)

    def pre(rows):  # (G, group, L): x_g W1[rows]^T + b1[rows]
        out = x_g @ w1.float()[rows].transpose(1, 2)
        return out + b1.float()[rows].unsqueeze(1) if b1 is not None else out

    if activation in MLP_GATED:  # rows 2 f (up) and 2 f + 1 (gate) of feature f
        h = ACTIVATION_FNS[GATED_TO_ACT[activation]](pre(2 * idx + 1)) * pre(2 * idx)
    else:
        h = ACTIVATION_FNS[activation](pre(idx))
    act_g = _grouped(act_cache, group)  # (G, group, F)
    old = act_g.gather(2, idx.unsqueeze(1).expand(-1, group, -1))
    delta = (h - old) * live
    out = _grouped(out_cache, group) + delta @ w2.float().t()[idx]  # (G, group, D)
    # only listed positions are written (an entry past the count may repeat a listed column)
    g_i, l_i = live.squeeze(1).bool().nonzero(as_tuple=True)
    new_act = act_g.transpose(1, 2).clone()  # (G, F, group)
    new_act[g_i, idx[g_i, l_i]] = h.transpose(1, 2)[g_i, l_i]
    new_act = new_act.transpose(1, 2)
    return (out.reshape(-1, out.shape[-1])[:m], new_act.reshape(-1, new_act.shape[-1])[:m])


def scatter_add_reference(src_packed, dest, indices, counts, *, group: int = 128):
    """The cache writeback alone, in float32: ``dest[g rows, indices[g, j]] += src_packed[g
    rows, j]`` for j below group g's count; ``src_packed`` (M, L), ``dest`` (M, F). Returns
    the new ``dest`` (float32); the inputs are not modified."""
    check_group(group)
    check_tensor("src_packed", src_packed, ndim=2, on_cuda=False)
    check_tensor("dest", dest, ndim=2, on_cuda=False)
    m = dest.shape[0]
    if src_packed.shape[0] != m or src_packed.shape[1] != indices.shape[-1]:
        raise ValueError(f"src_packed must be (M = {m}, L = {indices.shape[-1]}), got "
                         f"{tuple(src_packed.shape)}")
    _check_lists(indices, counts, -(-m // group), dest.shape[1])
    idx = indices.long().clamp(0, dest.shape[1] - 1).unsqueeze(1).expand(-1, group, -1)
    add = _grouped(src_packed, group) * _live(indices, counts).float().unsqueeze(1)
    out = _grouped(dest, group).scatter_add(2, idx, add)
    return out.reshape(-1, dest.shape[1])[:m]


def _tile_m(group: int) -> int:
    return 128 if group % 128 == 0 else 64


def _cache_m_major(name: str, t: torch.Tensor) -> bool:
    """Whether the (M, F) cache ``t`` is M-major (``torch.empty(F, M).t()``) rather than
    row-major; anything else is refused (the kernels write it in place, so no copy)."""
    m, f = t.shape
    if t.stride(1) == 1 or f == 1:
        return False
    if t.stride(0) == 1 or m == 1:
        return True
    raise ValueError(f"{name} must be row-major (stride(1) == 1) or M-major (stride(0) == 1, "
                     f"e.g. torch.empty(F, M).t()), got strides {t.stride()}: it is updated "
                     f"in place, so it is not copied")


def _vector_rows(t: torch.Tensor) -> bool:
    """Unit column stride and 16-byte aligned rows (cp.async / vector access)."""
    return (t.stride(1) == 1 and t.data_ptr() % 16 == 0
            and (t.shape[0] <= 1 or (t.stride(0) * t.element_size()) % 16 == 0))


def _rows16(t: torch.Tensor) -> torch.Tensor:
    return t if _vector_rows(t) else t.contiguous()


def check_list_values(indices, counts, columns: int) -> None:
    """Debug mode (a device sync): counts in [0, L]; listed indices in [0, F) and distinct
    within their group."""
    width = indices.shape[1]
    if bool(((counts < 0) | (counts > width)).any()):
        raise ValueError(f"counts must lie in [0, L = {width}]")
    live = _live(indices, counts)
    listed = indices[live]
    if listed.numel() and (int(listed.min()) < 0 or int(listed.max()) >= columns):
        raise ValueError(f"listed indices must lie in [0, F = {columns})")
    marked = torch.where(live, indices.long(), columns + torch.arange(
        width, device=indices.device))  # unlisted positions never collide
    ordered = marked.sort(dim=1).values
    if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
        raise ValueError("the listed indices of a group must be distinct")


def column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, *,
                      group: int = 128, activation: str = "gelu_tanh",
                      validate: bool | None = None) -> torch.Tensor:
    """One sparse step of the column-sparse MLP delta, in place (module docstring).

    Args:
        x: (M, K) bf16/fp16, any strides (copied unless rows are 16-byte aligned with a unit
            K stride); K a multiple of 8.
        w1, b1: (F, K) and (F,) or None: ``fc1``'s ``nn.Linear`` storage. For a gated
            ``activation``: (2F, K) and (2F,) or None, the interleaved (up, gate) rows of
            ``pack_gated_weight``.
        w2: (D, F): ``fc2.weight`` (transposed on every call, 2 D F bytes) or, faster, the
            (D, F) view ``w2t.t()`` of a contiguous (F, D) copy (``ColumnSparseMLP`` keeps
            one); D a multiple of 8.
        indices, counts: int32 (ceil(M / group), L) and (ceil(M / group),): group g's rows
            recompute columns ``indices[g, :counts[g]]`` (distinct, in [0, F), any order).
        act_cache: (M, F) last step's activations, row-major or M-major (``torch.empty(F,
            M).t()``, faster: a listed column of a group is contiguous); updated in place.
        out_cache: (M, D) last step's output, unit D stride and 16-byte aligned rows;
            updated in place and returned.
        group: rows per group, 64, 128 or 192.
        activation: ``gelu_tanh`` (default), ``gelu`` or ``silu``; or a gated form,
            ``swiglu``, ``geglu``, ``geglu_tanh`` or ``reglu`` (h = act(gate) * up; mm1
            covers 64 features per tile, on the mma.sync kernel on both paths).
        validate: check counts and index values (a device sync; default
            ``CUTE_KERNELS_VALIDATE``). Without it, bad lists give wrong numbers, never an
            out-of-bounds access.

    Returns:
        ``out_cache``, with ``act(x_g W1[idx]^T + b1[idx]) - act_cache[g, idx]`` times
        ``W2[:, idx]^T`` added per group (fp32 accumulation, one rounding), and
        ``act_cache[g, idx]`` holding the new activations.

    Raises:
        TypeError: a non-tensor, a dtype other than bf16/fp16 or tensors of mixed dtypes,
            int32 lists of another dtype.
        ValueError: mismatched shapes, a group other than 64/128/192, an unknown activation,
            K or D not multiples of 8, a cache layout the kernels cannot update in place,
            tensors off the GPU or on several devices, bad counts or indices (``validate``).
    """
    meta = any(is_meta(t) for t in (x, w1, b1, w2, indices, counts, act_cache, out_cache))
    traced = meta or torch.compiler.is_compiling()
    # traced: shapes and strides only (no data pointers); the custom op's body checks the rest
    _check_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation,
               on_device=not meta, pointers=not traced)
    if traced:
        torch.ops.cute_kernels.column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache,
                                                 out_cache, group, activation)
        return out_cache
    if value_checks(validate):
        check_list_values(indices, counts, w2.shape[1])
    _run_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation)
    return out_cache


def _check_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation, *,
               on_device: bool = True, pointers: bool = True) -> None:
    """Every metadata rule of ``column_sparse_mlp`` (``on_device``: the tensors must be on a
    GPU, which meta tensors skip; ``pointers``: out_cache's 16-byte alignment, which tracing
    cannot read)."""
    validate_column_sparse_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group,
                               activation)
    if on_device:
        for name, t in (("x", x), ("w1", w1), ("w2", w2), ("indices", indices),
                        ("counts", counts), ("act_cache", act_cache), ("out_cache", out_cache)):
            check_cuda(name, t)
    m, k = x.shape
    d = w2.shape[0]
    if k % 8 or d % 8:
        raise ValueError(f"K ({k}) and D ({d}) must be multiples of 8 (16-byte rows)")
    if -(-m // group) > MAX_GROUPS:
        raise ValueError(f"M / group must be at most {MAX_GROUPS} groups (the grid's z), got "
                         f"{-(-m // group)}")
    _cache_m_major("act_cache", act_cache)
    if out_cache.stride(1) != 1 or (pointers and not _vector_rows(out_cache)):
        raise ValueError("out_cache must have a unit column stride and 16-byte aligned rows "
                         "(it is updated in place, so it is not copied)")


def up_sm90_key(dtype, activation: str, bias: bool, m_major: bool) -> tuple:
    """The Hopper mm1's compile key under this module's switches (the op and the registry);
    the last 0 lets the kernel pick the stages its staging tile leaves room for."""
    return (dtype, activation, bias, m_major, SM90_UP_ADDRESSES, SM90_UP_EPILOGUE_WG,
            SM90_NARROW_STAGING, 0)


def down_sm90_key(dtype) -> tuple:
    """The Hopper mm2's compile key under this module's switches (as ``up_sm90_key``)."""
    return (dtype, SM90_DOWN_CHUNK, SM90_NARROW_STAGING, 0)


def _run_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation) -> None:
    """The two kernel launches of a checked call."""
    m, f, d = x.shape[0], w2.shape[1], w2.shape[0]
    if m == 0 or f == 0 or d == 0:
        return
    m_major = _cache_m_major("act_cache", act_cache)
    x, w1 = _rows16(x), _rows16(w1)
    w2t = _rows16(w2.t())
    indices, counts = indices.contiguous(), counts.contiguous()
    b1 = b1.contiguous() if b1 is not None else None
    padded = -(-indices.shape[1] // TILE_N) * TILE_N
    delta = torch.empty(m, padded, dtype=x.dtype, device=x.device)
    hopper = group == 128 and device_target(x.device)[0] == "hopper"
    groups, sms = indices.shape[0], sm_count(x.device)
    tile_m = _tile_m(group)
    if SM90_UP_ON and hopper and x.shape[1] % 64 == 0 and (SM90_UP_GATED
                                                          or activation not in MLP_GATED):
        # work units: a group's packed columns in tiles of TILE_N features (half, gated)
        tile_features = TILE_N // 2 if activation in MLP_GATED else TILE_N
        units = groups * -(-indices.shape[1] // tile_features)
        _launch("up_sm90", x.device, up_sm90_key(x.dtype, activation, b1 is not None, m_major),
                mX=x.unsqueeze(-1), mW1=w1, mB1=b1, mIdx=indices, mCounts=counts,
                mAct=act_cache, mDelta=delta, num_ctas=min(units, sms))
    else:
        up = tuple(sorted(UP_CONFIG.items()))
        _launch("up", x.device, (x.dtype, activation, b1 is not None, group, tile_m, m_major,
                                 up),
                mX=x, mW1=w1, mB1=b1, mIdx=indices, mCounts=counts, mAct=act_cache,
                mDelta=delta)
    _run_down(delta, w2t, indices, counts, out_cache, group)


def _run_down(delta, w2t, indices, counts, out_cache, group) -> None:
    """mm2 alone, ``out_cache[g] += delta[g, :counts[g]] @ w2t[indices[g, :counts[g]]]``:
    ``delta`` (M, L padded to TILE_N) as mm1 leaves it, ``w2t`` (F, D) with 16-byte rows
    (``_rows16(w2.t())``), lists contiguous (perf/column_sparse_mlp.py times it beside
    ``scatter_add`` on partitioned SMs)."""
    d = out_cache.shape[1]
    device = delta.device
    if SM90_DOWN_ON and group == 128 and device_target(device)[0] == "hopper" and d % 128 == 0:
        _launch("down_sm90", device, down_sm90_key(delta.dtype),
                mDelta=delta.unsqueeze(-1), mW2t=w2t, mIdx=indices, mCounts=counts,
                mOut=out_cache, num_ctas=min(indices.shape[0] * (d // 128), sm_count(device)))
    else:
        _launch("down", device, (delta.dtype, group, _tile_m(group),
                                 tuple(sorted(DOWN_CONFIG.items()))),
                mDelta=delta, mW2t=w2t, mIdx=indices, mCounts=counts, mOut=out_cache)


@torch.library.custom_op("cute_kernels::column_sparse_mlp",
                         mutates_args=("act_cache", "out_cache"))
def _column_sparse_mlp_op(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None,
                          w2: torch.Tensor, indices: torch.Tensor, counts: torch.Tensor,
                          act_cache: torch.Tensor, out_cache: torch.Tensor, group: int,
                          activation: str) -> None:
    """The custom op ``torch.compile`` and meta tensors go through (``column_sparse_mlp``)."""
    _check_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation)
    _run_mlp(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation)


@_column_sparse_mlp_op.register_fake
def _(x, w1, b1, w2, indices, counts, act_cache, out_cache, group, activation) -> None:
    return None


def scatter_add(src_packed, dest, indices, counts, *, group: int = 128,
                num_sms: int | None = None, validate: bool | None = None) -> torch.Tensor:
    """The cache writeback alone, in place: ``dest[g rows, indices[g, j]] += src_packed[g
    rows, j]`` for j below ``counts[g]``.

    Args:
        src_packed: (M, L) bf16/fp16 with a unit column stride, or M-major
            (``torch.empty(L, M).t()``), which on the bulk path (below) with 16-byte aligned
            columns moves each listed column by one bulk copy in and one bulk reduction out
            (the fastest form: no registers, no transpose); copied to a unit column stride
            otherwise.
        dest: (M, F) in src's dtype, row-major or M-major (``torch.empty(F, M).t()``); updated
            in place and returned. On Hopper an M-major ``dest`` with M and its column stride
            multiples of 8 takes the TMA bulk reduction (``cp.reduce.async.bulk .add``).
        indices, counts: int32 (ceil(M / group), L) and (ceil(M / group),), distinct indices
            in [0, F) per group.
        group: rows per group, 64, 128 or 192.
        num_sms: run the kernel as this many persistent CTAs (one per SM at most: the rest
            of the GPU stays free for a concurrent GEMM, but one CTA per SM keeps few bytes in
            flight); default one CTA per tile, or inside an ``SmPartition`` side region without
            green contexts that region's SMs. With green contexts, run it in
            ``SmPartition.side()`` instead: the hardware keeps all its CTAs on the side SMs.
        validate: check counts and index values (a device sync; default
            ``CUTE_KERNELS_VALIDATE``).

    Returns:
        ``dest``.

    Raises:
        TypeError: a non-tensor, dtypes other than bf16/fp16 or not matching, non-int32
            lists, a non-int ``num_sms``.
        ValueError: mismatched shapes, a group other than 64/128/192, ``num_sms`` < 1, a
            ``dest`` that is neither row-major nor M-major, tensors off the GPU or on several
            devices, bad counts or indices (``validate``).
    """
    meta = any(is_meta(t) for t in (src_packed, dest, indices, counts))
    _check_scatter(src_packed, dest, indices, counts, group, num_sms, on_device=not meta)
    if meta or torch.compiler.is_compiling():
        torch.ops.cute_kernels.scatter_add(src_packed, dest, indices, counts, group, num_sms)
        return dest
    if value_checks(validate):
        check_list_values(indices, counts, dest.shape[1])
    _run_scatter(src_packed, dest, indices, counts, group, num_sms)
    return dest


def _check_scatter(src_packed, dest, indices, counts, group, num_sms, *,
                   on_device: bool = True) -> None:
    """Every metadata rule of ``scatter_add``."""
    check_group(group)
    check_tensor("src_packed", src_packed, dtypes=DTYPES, ndim=2, on_cuda=on_device)
    check_tensor("dest", dest, dtypes=DTYPES, ndim=2, on_cuda=on_device)
    if dest.dtype != src_packed.dtype:
        raise TypeError(f"dest must have src_packed's dtype {src_packed.dtype}, got "
                        f"{dest.dtype}")
    m, f = dest.shape
    _check_lists(indices, counts, -(-m // group), f)
    if on_device:
        for name, t in (("indices", indices), ("counts", counts)):
            check_cuda(name, t)
    if src_packed.shape != (m, indices.shape[1]):
        raise ValueError(f"src_packed must be (M, L) = ({m}, {indices.shape[1]}), got "
                         f"{tuple(src_packed.shape)}")
    if len({t.device for t in (src_packed, dest, indices, counts)}) != 1:
        raise ValueError("src_packed, dest, indices and counts must be on one device")
    if num_sms is not None:
        check_int("num_sms", num_sms, min_value=1)
    if -(-m // group) > MAX_GROUPS:
        raise ValueError(f"M / group must be at most {MAX_GROUPS} groups, got {-(-m // group)}")
    _cache_m_major("dest", dest)


def scatter_adder(bulk: bool, vec: bool, whole_gpu: bool) -> str:
    """How a ``scatter_add`` launch adds its tiles (``SCATTER_ADDER``, or by default: rmw where
    the bulk path runs one CTA per tile over the whole GPU from a 16-byte aligned source, else
    bulk, which keeps more bytes in flight per SM on a few SMs). Off the bulk path: "bulk",
    which the element path ignores."""
    if not bulk:
        return "bulk"
    return SCATTER_ADDER or ("rmw" if vec and whole_gpu else "bulk")


def _run_scatter(src_packed, dest, indices, counts, group, num_sms) -> None:
    """The launch of a checked call."""
    m, f = dest.shape
    if m == 0 or f == 0:
        return
    m_major = _cache_m_major("dest", dest)
    indices, counts = indices.contiguous(), counts.contiguous()
    bulk = (m_major and device_target(dest.device)[0] == "hopper" and m % 8 == 0
            and dest.stride(1) % 8 == 0 and dest.data_ptr() % 16 == 0)
    # an M-major source with 16-byte aligned columns: bulk copies in, bulk reductions out
    src_m_major = (bulk and SCATTER_ADDER in (None, "bulk") and src_packed.stride(0) == 1
                   and src_packed.stride(1) % 8 == 0 and src_packed.data_ptr() % 16 == 0)
    if src_packed.stride(1) != 1 and not src_m_major:
        src_packed = src_packed.contiguous()
    # 16-byte source loads where its rows allow (a packed buffer padded to 8 columns does)
    vec = bulk and src_packed.stride(0) % 8 == 0 and src_packed.data_ptr() % 16 == 0
    tiles = indices.shape[0] * -(-indices.shape[1] // 64)
    whole_gpu = num_sms is None and sm_count(dest.device) == device_sm_count(dest.device)
    if num_sms is None:  # one CTA per tile, unless an SmPartition region without green
        num_sms = confining_grid(dest.device)  # contexts must keep it on its SMs
    num_ctas = min(tiles, num_sms) if num_sms is not None else tiles
    # one transposed-tile buffer when every CTA adds one tile (more CTAs fit an SM), two when
    # CTAs walk several (a tile's loads overlap the reductions of the one before)
    buffers = 1 if num_ctas == tiles and SCATTER_ONE_BUFFER else 2
    adder = "bulk" if src_m_major else scatter_adder(bulk, vec, whole_gpu)
    key = (dest.dtype, group, m_major, bulk, vec and not src_m_major, adder, buffers,
           src_m_major)
    _launch("scatter", dest.device, key, mSrc=src_packed,
            mDest=dest, mIdx=indices, mCounts=counts, num_ctas=num_ctas)


@torch.library.custom_op("cute_kernels::scatter_add", mutates_args=("dest",))
def _scatter_add_op(src_packed: torch.Tensor, dest: torch.Tensor, indices: torch.Tensor,
                    counts: torch.Tensor, group: int, num_sms: int | None) -> None:
    """The custom op ``torch.compile`` and meta tensors go through (``scatter_add``)."""
    _check_scatter(src_packed, dest, indices, counts, group, num_sms)
    _run_scatter(src_packed, dest, indices, counts, group, num_sms)


@_scatter_add_op.register_fake
def _(src_packed, dest, indices, counts, group, num_sms) -> None:
    return None


def make_build(op: str, key: tuple):
    """The kernel object and symbolic arguments of one of the op's kernels (arch-independent:
    mma.sync on both paths)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    from ..kernels import mlp_delta, mlp_delta_sm90
    from ..kernels import scatter_add as scatter_add_kernel
    from ..runtime.bridge import cutlass_dtype, fake_compact, fake_mkl, fake_vector, sym
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    dtype = key[0]
    dt = cutlass_dtype(dtype)

    def rows16():  # unit column stride, 16-byte aligned rows
        return make_fake_tensor(dt, (sym(), sym(8)), (sym(8), 1), assumed_align=16)

    if op == "up":
        _, activation, bias, group, tile_m, m_major, config = key
        config = dict(config)
        kernel = mlp_delta.MlpDeltaUp(activation, bias, group, m_major,
                                      tile=(tile_m, TILE_N, config["tile_k"]),
                                      stages=config["stages"], warps=config["warps"],
                                      cache_batch=config["cache_batch"])
        act = make_fake_tensor(dt, (sym(), sym()), (1, sym()) if m_major else (sym(), 1),
                               assumed_align=2)
        named = dict(mX=rows16(), mW1=rows16(), mB1=fake_vector(dtype, align=2) if bias
                     else None, mIdx=fake_compact(INDEX_DTYPE, 2),
                     mCounts=fake_compact(INDEX_DTYPE, 1), mAct=act, mDelta=rows16())
    elif op == "down":
        _, group, tile_m, config = key
        config = dict(config)
        kernel = mlp_delta.MlpDeltaDown(group, tile=(tile_m, config["tile_n"],
                                                     config["tile_k"]),
                                        stages=config["stages"], warps=config["warps"])
        named = dict(mDelta=rows16(), mW2t=rows16(), mIdx=fake_compact(INDEX_DTYPE, 2),
                     mCounts=fake_compact(INDEX_DTYPE, 1), mOut=rows16())
    elif op == "up_sm90":
        # narrow: the 16-bit staging tile; stages: 0 for the kernel's default for it
        _, activation, bias, m_major, addresses, epilogue_wg, narrow, stages = key
        kernel = mlp_delta_sm90.MlpDeltaUpSm90(activation, bias, 128, m_major, addresses,
                                               epilogue_wg, narrow, stages)
        act = make_fake_tensor(dt, (sym(), sym()), (1, sym()) if m_major else (sym(), 1),
                               assumed_align=2)
        named = dict(mX=fake_mkl(dtype, "k"), mW1=rows16(),
                     mB1=fake_vector(dtype, align=2) if bias else None,
                     mIdx=fake_compact(INDEX_DTYPE, 2), mCounts=fake_compact(INDEX_DTYPE, 1),
                     mAct=act, mDelta=rows16(), num_ctas=cutlass.Int32(1))
    elif op == "down_sm90":
        _, chunk, narrow, stages = key
        kernel = mlp_delta_sm90.MlpDeltaDownSm90(128, chunk, narrow, stages)
        named = dict(mDelta=fake_mkl(dtype, "k"), mW2t=rows16(),
                     mIdx=fake_compact(INDEX_DTYPE, 2), mCounts=fake_compact(INDEX_DTYPE, 1),
                     mOut=rows16(), num_ctas=cutlass.Int32(1))
    elif op == "scatter":
        _, group, m_major, bulk, vec, adder, buffers, src_m_major = key
        kernel = scatter_add_kernel.ScatterAdd(group, m_major, bulk, vec, adder, buffers,
                                               src_m_major)
        dest = make_fake_tensor(dt, (sym(), sym()), (1, sym(8) if bulk else sym()) if m_major
                                else (sym(), 1), assumed_align=16 if bulk else 2)
        # vec: 16-byte aligned rows of any width (a padded packed buffer's view); src_m_major:
        # 16-byte aligned columns
        if src_m_major:
            src = make_fake_tensor(dt, (sym(), sym()), (1, sym(8)), assumed_align=16)
        else:
            src = make_fake_tensor(dt, (sym(), sym()), (sym(8) if vec else sym(), 1),
                                   assumed_align=16 if vec else 2)
        named = dict(mSrc=src,
                     mDest=dest, mIdx=fake_compact(INDEX_DTYPE, 2),
                     mCounts=fake_compact(INDEX_DTYPE, 1), num_ctas=cutlass.Int32(1))
    else:
        raise ValueError(f"unknown column-sparse MLP kernel {op!r}")
    return Build(kernel, launch_args(kernel, **named))


def _launch(op: str, device, key: tuple, **named) -> None:
    from ..runtime.launch import kernel_params

    kernel = kernel_for(device, (f"csp_mlp_{op}", *key), lambda path, target: make_build(op, key))
    kernel(*kernel_params(MLP_KERNELS[op]).call_args(**named))
