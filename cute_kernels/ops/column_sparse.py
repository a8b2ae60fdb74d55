"""Column-sparse attention (issue 14): ``column_sparse_attention`` and the index builders
``column_indices`` and ``topk_indices``; argument rules, float32 references, torch entry points.

The sparsity of Chipmunk Part III ("Chipmunk: Deep Dive on GPU Kernel Optimizations and Systems
(Part III)", docs/attention.md, References): each group of ``group`` consecutive query rows
(192 by default) attends to its own set of key rows, named by an index list. The kernels pack
the selected K/V rows into dense shared-memory tiles, so the set may be any size and order.

Layout: q (B, H, S_q, D), k and v (B, H_kv, S_kv, D), as :func:`~.attention.attention` (GQA:
query head h reads kv head ``h // (H // H_kv)``). ``indices`` int32 (B, H, G, L) and ``counts``
int32 (B, H, G) with G = ceil(S_q / group): query group g of head h (rows ``g * group`` to
``min((g + 1) * group, S_q) - 1``) attends to the key rows ``indices[b, h, g, :counts[b, h,
g]]`` and its softmax is normalised over exactly that list. Entries past the count are never
read (any value). L >= 1 may be anything >= max(counts).

Decisions (tests/test_column_sparse_reference.py holds each):

* **Duplicates** count as often as they appear: the kernels gather what they are given, so a key
  listed twice enters the softmax twice (its weight doubles). The references do the same. The
  index builders here never produce duplicates.
* **A count of 0** gives o = 0 (with ``accumulate``: ``out`` unchanged) and lse = -inf.
* **Value checks** (0 <= count <= L, 0 <= index < S_kv for the first ``count`` entries;
  :func:`validate_indices`) read the index tensors, i.e. synchronise with the device, so the op
  runs them only in debug mode: ``validate=True``, or ``CUTE_KERNELS_VALIDATE=1`` in the
  environment (``runtime/validate.py``: ``value_checks``). Without them an index out of range
  is undefined behaviour of the kernel (it must clamp its reads, never read out of bounds; the
  result is then wrong, silently). The references always check (they are the oracle).
* **out / accumulate / out_scale**: the op writes ``out_scale * attention`` into ``out`` (a new
  tensor if None), or with ``accumulate=True`` adds it onto ``out`` (required then): the
  cross-step delta ``o = o_cache + csp(q, k, v)``. lse is always that of the attention itself.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..masks import mask_of
from ..runtime.arch import device_target, forced_path, sm_count
from ..runtime.bridge import kernel_for
from ..runtime.validate import (
    check_int,
    check_no_overlap,
    check_same_device,
    check_tensor,
    value_checks,
)
from ..tuning.attention import (
    SHORT_GATHER_MAX_KEYS,
    SHORT_GATHER_PERSISTENT,
    hopper_gather_config,
)
from .attention import _check_device_args, schedule_args, validate_attention
from .bitpack import pack_mask, packed_width, unpack_mask_reference
from .column_lists import counts_unchecked, lists_unchecked
from .derived import DerivedCache
from .dispatch import KernelOp, is_meta
from .tile_order import group_rows, longest_first_order, lpt_walks, snake_walks
from .topk import SCORE_DTYPES, topk_rows

GROUPS = (64, 128, 192)
INDEX_DTYPE = torch.int32
#: The torch index builders work on rows in chunks of about this many elements, which bounds
#: their int64 temporaries (a mask of Chipmunk's HunyuanVideo size, 24 x 614 x 118k, would
#: otherwise need ~14 GB for each).
CHUNK_ELEMENTS = 1 << 24


def num_groups(s_q: int, group: int) -> int:
    """G = ceil(S_q / group): the query groups of a sequence."""
    return -(-s_q // group)


def check_group(group) -> int:
    if isinstance(group, bool) or not isinstance(group, int) or group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS} (query rows per index list), "
                         f"got {group!r}")
    return group


def _check_real(name: str, value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = " (pass a 0-d tensor as .item())" if isinstance(value, torch.Tensor) else ""
        raise TypeError(f"{name} must be a number ({what}), got {type(value).__name__} "
                        f"{value!r}{hint}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number ({what}), got {value!r}")
    return float(value)


def validate_column_sparse(q, k, v, indices, counts, group, scale, out, accumulate,
                           out_scale) -> tuple[float, float]:
    """Check the arguments of :func:`column_sparse_attention` against the rules in the module
    docstring (metadata only: no sync); return ``(scale, out_scale)`` as floats (``scale``
    None is 1 / sqrt(D)). The index values are :func:`validate_indices`'s."""
    scale = validate_attention(q, k, v, scale)
    group = check_group(group)
    b, h, s_q, _ = q.shape
    g = num_groups(s_q, group)
    check_tensor("indices", indices, dtypes=(INDEX_DTYPE,), ndim=4, on_cuda=False)
    check_tensor("counts", counts, dtypes=(INDEX_DTYPE,), ndim=3, on_cuda=False)
    if tuple(indices.shape[:3]) != (b, h, g) or indices.shape[3] < 1:
        raise ValueError(f"indices must have shape (B, H, ceil(S_q / group), L) = ({b}, {h}, "
                         f"{g}, L) with L >= 1 for S_q = {s_q} and group = {group}, got "
                         f"{tuple(indices.shape)}")
    if tuple(counts.shape) != (b, h, g):
        raise ValueError(f"counts must have shape (B, H, ceil(S_q / group)) = ({b}, {h}, {g}) "
                         f"for S_q = {s_q} and group = {group}, got {tuple(counts.shape)}")
    if not isinstance(accumulate, bool):
        raise TypeError(f"accumulate must be a bool, got {type(accumulate).__name__}")
    out_scale = _check_real("out_scale", out_scale, "the factor of the attention written or "
                            "added into out")
    if out is None:
        if accumulate:
            raise ValueError("out is required with accumulate=True (the tensor the attention "
                             "is added onto)")
    else:
        check_tensor("out", out, dtypes=(q.dtype,), ndim=4, on_cuda=False)
        if out.shape != q.shape:
            raise ValueError(f"out must have q's shape {tuple(q.shape)}, got "
                             f"{tuple(out.shape)}")
        if out.stride(-1) != 1 or any(s * out.element_size() % 16 and n > 1
                                      for s, n in zip(out.stride()[:-1], out.shape[:-1])):
            raise ValueError(f"out must have a unit-stride head dim and other strides that are "
                             f"multiples of 16 bytes, got strides {tuple(out.stride())}")
    extra = {"out": out} if out is not None else {}
    check_same_device(q=q, indices=indices, counts=counts, **extra)
    return scale, out_scale


def validate_indices(indices: torch.Tensor, counts: torch.Tensor, s_kv: int) -> None:
    """The value rules: ``0 <= counts <= L`` and ``0 <= index < S_kv`` for the first ``count``
    entries of each list (entries past the count are not looked at). Reads the tensors, so on
    a GPU it synchronises: the op runs it only in debug mode (module docstring). Meta and fake
    tensors have no values and pass. Raises ``ValueError`` naming the first bad entry."""
    if is_meta(indices) or is_meta(counts):
        return
    length = indices.shape[-1]
    bad = (counts < 0) | (counts > length)
    if bool(bad.any()):
        at = tuple(bad.nonzero()[0].tolist())
        raise ValueError(f"counts{list(at)} = {int(counts[at])} is outside [0, L = {length}] "
                         f"(L = indices.shape[-1])")
    live = torch.arange(length, device=indices.device) < counts.unsqueeze(-1)
    bad = live & ((indices < 0) | (indices >= s_kv))
    if bool(bad.any()):
        at = tuple(bad.nonzero()[0].tolist())
        raise ValueError(f"indices{list(at)} = {int(indices[at])} is out of range for "
                         f"S_kv = {s_kv} (index < counts{list(at[:-1])} = "
                         f"{int(counts[at[:-1]])})")


def column_sparse_attention_reference(q, k, v, indices, counts, *, group: int = 192,
                                      scale: float | None = None, out=None,
                                      accumulate: bool = False, out_scale: float = 1.0):
    """(o fp32 (B, H, S_q, D), lse fp32 (B, H, S_q)): the value :func:`column_sparse_attention`
    writes (``out`` is read, never written) and its natural-log log-sum-exp.

    One batched gather, no loop over groups: K and V rows (B, H, G, L, D) by the index lists
    (entries past the count point at row 0 and are masked with -inf), the logits of each
    group's padded ``group`` query rows against its L keys, the softmax over the list
    (duplicates count twice), rows past S_q dropped. Checks the index values first."""
    scale, out_scale = validate_column_sparse(q, k, v, indices, counts, group, scale, out,
                                              accumulate, out_scale)
    validate_indices(indices, counts, k.shape[2])
    b, h, s_q, d = q.shape
    g, length = indices.shape[2], indices.shape[3]
    dev = q.device
    live = torch.arange(length, device=dev) < counts.unsqueeze(-1).long()  # (B, H, G, L)
    rows = torch.where(live, indices, 0).long()
    batch = torch.arange(b, device=dev).view(b, 1, 1, 1)
    kv_head = (torch.arange(h, device=dev) // (h // k.shape[1])).view(1, h, 1, 1)
    k_sel = k[batch, kv_head, rows].float()  # (B, H, G, L, D)
    v_sel = v[batch, kv_head, rows].float()
    q_pad = torch.nn.functional.pad(q.float(), (0, 0, 0, g * group - s_q))
    s = torch.matmul(q_pad.view(b, h, g, group, d), k_sel.transpose(-1, -2)) * scale
    live = live.unsqueeze(3)  # (B, H, G, 1, L): one list for the group's rows
    s = s.masked_fill(~live, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for a count of 0
    p = torch.where(live, torch.exp(s - lse.unsqueeze(-1)), 0.0)
    o = torch.matmul(p, v_sel).view(b, h, g * group, d)[:, :, :s_q] * out_scale
    if accumulate:
        o = out.float() + o
    return o, lse.view(b, h, g * group)[:, :, :s_q]


# ---------------------------------------------------------------------------------------------
# The op. Its kernels (the Hopper and Ampere attention kernels with a gather K/V loader and a
# block-list key-block policy, docs/README.md "Seams for new attention variants") are being
# written on another branch; ``make_build`` is the one place that waits for them.


def gather_block_m(path: str, group: int, short: bool = False, entry_keys: int = 1) -> int:
    """The query rows of a column-sparse CTA: the group on Hopper (128 or 192; 64 for
    ``short`` lists of single keys, group 128, ``hopper_gather_config``), else the Ampere
    kernel's 64-row tile (128 for group 128)."""
    if path == "hopper" and group in (128, 192):
        return hopper_gather_config(128, group, short, entry_keys=entry_keys)["block_m"]
    return 64 if group % 128 else 128


def make_build(path: str, dtype, head_dim: int, group: int, accumulate: bool,
               config: dict | None = None, entry_keys: int = 1, ordered: bool = False,
               short: bool = False, persistent: bool = False, mask=None):
    """The column-sparse attention kernel of ``path`` (``AttentionSm90`` / ``AttentionSm80``
    in their gather configuration) against symbolic tensors: q/k/v/o (B, H, S, D) as
    :func:`.attention.make_build`, compact int32 indices (B, H, G, L) and counts (B, H, G), a
    compact fp32 lse (B, H, S_q); ``accumulate`` compiles the ``o += out_scale * attention``
    epilogue. ``config``: Hopper overrides (tests, tuning). ``entry_keys`` > 1: the lists
    name blocks of that many consecutive keys, expanded in the kernels (block-sparse
    attention's packed small blocks). ``ordered``: the CTAs take their tiles from an int32
    tile order (``tile_order``; the op passes the longest lists first). ``short``: lists of at
    most ``SHORT_GATHER_MAX_KEYS`` keys, and ``persistent`` their persistent CTAs walking
    int32 tile walks instead of an ordered grid (``hopper_gather_config``). ``mask``: an
    element mask (``cute_kernels.masks``) inside the partial blocks of packed block entries
    (``entry_keys`` > 1, listed first; the kernel reads each group's full positions from
    compact int32 counts (B, H, G) and the document mask's ids (B, S))."""
    import cutlass

    from ..runtime.bridge import fake_bhsd, fake_compact, fake_vector
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    def bhsd():
        return fake_bhsd(dtype, head_dim)

    if path == "hopper" and group in (128, 192):
        from ..kernels.attention.sm90 import AttentionSm90

        cfg = (hopper_gather_config(head_dim, group, short, persistent, entry_keys)
               if config is None else config)
        entry = {"gather_entry_keys": entry_keys} if entry_keys != 1 else {}
        if mask is not None:
            entry["mask"] = mask
        kernel = AttentionSm90(head_dim, False, **cfg, **entry, accumulate=accumulate,
                               tile_order=ordered)
    else:
        # group 64 has no Hopper tile (one consumer warpgroup per 64 rows of a group, two or
        # three per CTA): it runs the Ampere kernel there too, compiled for sm_90a
        from ..kernels.attention.sm80 import AttentionSm80

        kernel = AttentionSm80(head_dim, False, block_m=gather_block_m(path, group), group=group,
                               gather=True, accumulate=accumulate,
                               gather_entry_keys=entry_keys, tile_order=ordered, mask=mask)
    # the tile order of an ordered grid, or a persistent kernel's walks and CTA count
    schedule = schedule_args(kernel) or ({"mFullIndices": None, "mFullCounts": None,
                                          "mDocIds": None,
                                          "mTileOrder": fake_vector(torch.int32, align=4)}
                                         if ordered else {})
    if mask is not None:  # the groups' full positions (and document ids) for the mask
        schedule = {**schedule, "mFullIndices": None,
                    "mFullCounts": fake_compact(torch.int32, 3),
                    "mDocIds": fake_compact(torch.int32, 2) if mask.needs_doc_ids else None}
    return Build(kernel, launch_args(
        kernel, mQ=bhsd(), mK=bhsd(), mV=bhsd(), mO=bhsd(), mLSE=fake_compact(torch.float32, 3),
        mPrevLSE=None, mColsum=None, mIndices=fake_compact(torch.int32, 4),
        mCounts=fake_compact(torch.int32, 3), scale=cutlass.Float32(1.0),
        out_scale=cutlass.Float32(1.0) if accumulate else None, **schedule))


def gather_tile_order(counts: torch.Tensor, s_q: int, block_m: int, group: int
                      ) -> torch.Tensor:
    """The gather grid's tile order (``tile_order``): tile ``(b * H + h) * M + m`` of the
    (M = ceil(S_q / block_m), H, B) grid reads group ``m * block_m // group``'s list, whose
    count is its work; longest first within chunks of heads (ops/tile_order.py)."""
    rows = group_rows(-(-s_q // block_m), block_m, group, counts.shape[2], counts.device)
    return longest_first_order(counts.index_select(2, rows))


_TILING: dict = {}
#: tile orders per counts tensor, reused while it is the same unchanged object (ops/derived.py:
#: block-sparse's packed lists pass the same counts every call)
_ORDERS = DerivedCache()


def _gather_tiling(device: torch.device, group: int, head_dim: int = 128,
                   list_keys: int | None = None, entry_keys: int = 1
                   ) -> tuple[int, int, bool]:
    """(query rows per CTA, CTAs per wave, short) of the gather kernel on ``device`` for
    ``group`` and lists of about ``list_keys`` keys (None: long) of ``entry_keys``-key
    entries: the path cached per device, forced path and group (resolving it costs more than
    a launch); the SM count read on every call (an ``SmPartition`` region changes it).
    ``short``: the Hopper short-list tiles (``hopper_gather_config``: 64 x 64 at two CTAs
    per SM, or for packed blocks 128 x 64 with turns)."""
    key = (device.index, forced_path(), group)
    if key not in _TILING:
        _TILING[key] = device_target(device)[0]
    path = _TILING[key]
    short = (path == "hopper" and group == 128 and head_dim == 128 and list_keys is not None
             and list_keys <= SHORT_GATHER_MAX_KEYS)
    per_sm = (hopper_gather_config(head_dim, group, True, entry_keys=entry_keys)
              .get("ctas_per_sm", 1) if short else 1)
    return gather_block_m(path, group, short, entry_keys), sm_count(device) * per_sm, short


def _column_sparse_attention(q, k, v, indices, counts, base, group: int, scale: float,
                             out_scale: float, entry_keys: int = 1,
                             list_keys: int | None = None, walks=None, full_counts=None,
                             doc_ids=None, mask_key: int = 0, out=None):
    """The direct route, after ``validate_column_sparse``: (o, lse) from the path's kernel.
    ``base``: the tensor the attention is added onto (None: written), read and left unchanged
    unless it is ``out`` itself (the eager ``accumulate=True`` call); o is ``out`` when given,
    else a new tensor in q's memory layout. ``entry_keys`` > 1: ``indices`` name blocks of
    that many keys and ``counts`` count key positions (``make_build``). ``list_keys``: the
    lists' typical length in keys where the caller knows it (default their width), which picks
    the short-list tiles (a choice of speed only: either tile runs any list). ``walks``: the
    short tiles' persistent walks dealt on the host for these counts (``packed_walks``; the
    caller keeps them per list), used where the short tiles outnumber a wave of CTAs.
    ``mask_key`` (``masks.key_of``; block entries only): the element mask inside each list's
    partial blocks, which come first; ``full_counts`` int32 (B, H, G) the positions of the
    full blocks that end each list, ``doc_ids`` the document mask's ids."""
    mask = mask_of(mask_key)
    tensors = {"q": q, "k": k, "v": v, "indices": indices, "counts": counts}
    if mask is not None:
        tensors["full_counts"] = full_counts
        if doc_ids is not None:
            tensors["doc_ids"] = doc_ids
    if base is not None:
        tensors["base"] = base
    if out is not None:
        tensors["out"] = out
    _check_device_args(**tensors)
    if out is not None:
        check_no_overlap("out", out, q, k, v, indices, counts)
    b, h, s_q, d = q.shape
    if list_keys is None:
        list_keys = indices.shape[-1] * entry_keys
    block_m, wave, short = _gather_tiling(q.device, group, d, list_keys, entry_keys)
    # more tiles than one wave of CTAs: uneven lists would leave the last wave ragged, so the
    # longest go first (below one wave every tile starts at once anyway); short lists of
    # single keys then run persistent CTAs dealt the same order (SHORT_GATHER_PERSISTENT)
    tiles = b * h * -(-s_q // block_m)
    ordered = tiles > wave
    persistent = (ordered and short and base is None
                  and (walks is not None or (entry_keys == 1 and SHORT_GATHER_PERSISTENT)))
    ordered = ordered and not persistent
    key = ("column_sparse_attention", q.dtype, d, group, base is not None, entry_keys,
           ordered, short, persistent) + ((mask,) if mask is not None else ())
    kernel = kernel_for(q.device, key, lambda path, target: make_build(
        path, q.dtype, d, group, base is not None, entry_keys=entry_keys, ordered=ordered,
        short=short, persistent=persistent, mask=mask))
    if out is None:
        o = torch.empty_like(q) if base is None else base.clone()
    else:
        o = out
        if base is not None and base is not out:
            o.copy_(base)
    lse = torch.empty(b, h, s_q, dtype=torch.float32, device=q.device)
    kernel(*_column_sparse_params().call_args(
        mQ=q, mK=k, mV=v, mO=o, mLSE=lse, mPrevLSE=None, mColsum=None,
        mIndices=indices.contiguous(), mCounts=counts.contiguous(), scale=scale,
        out_scale=out_scale if base is not None else None,
        **_gather_schedule(counts, s_q, block_m, group, ordered, persistent, wave, tiles,
                           walks),
        **({"mFullCounts": full_counts.contiguous(), "mDocIds": doc_ids}
           if mask is not None else {})))
    if base is None and out_scale != 1.0:
        # the writing kernel has no factor (the accumulating one applies it in registers)
        o.mul_(out_scale)
    return o, lse


def _gather_schedule(counts, s_q: int, block_m: int, group: int, ordered: bool,
                     persistent: bool, wave: int, tiles: int, walks=None) -> dict:
    """The schedule arguments of a gather launch: the ordered grid's tile order, or the
    persistent CTAs' walks (``walks`` as given, else the same order dealt to ``wave`` CTAs)
    and their count; each cached per counts tensor (``_ORDERS``)."""
    if persistent and walks is not None:  # CSR: ctas + 1 offsets, then the tiles
        return {"mTileOrder": walks, "num_ctas": walks.numel() - 1 - tiles}
    if persistent:
        walks = _ORDERS.get((counts,), (s_q, block_m, group, wave), lambda: snake_walks(
            gather_tile_order(counts, s_q, block_m, group), wave))
        return {"mTileOrder": walks, "num_ctas": min(wave, tiles)}
    if ordered:
        return {"mTileOrder": _ORDERS.get((counts,), (s_q, block_m, group),
                                          lambda: gather_tile_order(counts, s_q, block_m,
                                                                    group))}
    return {}


def packed_walks(counts: torch.Tensor, device: torch.device, s_q: int, group: int,
                 head_dim: int, list_keys: int, entry_keys: int = 1) -> torch.Tensor | None:
    """Persistent walks of the short gather tiles for lists whose ``counts`` (int32 (B, H,
    G), key positions, on the host) are known ahead: each tile of the longest-first order to
    the CTA that frees up first (``tile_order.lpt_walks``, a tile costing its key tiles plus
    ``TILE_FIXED_BLOCKS``), on ``device``; None where the short tiles do not apply or fit one
    wave. Block-sparse attention deals them once per reused mask: better balanced than the
    device's ``snake_walks`` (packed 32-key blocks at S 8k, H200: 0.100 against 0.112 ms)."""
    from .attention import TILE_FIXED_BLOCKS

    block_m, wave, short = _gather_tiling(device, group, head_dim, list_keys, entry_keys)
    b, h, _ = counts.shape
    m = -(-s_q // block_m)
    if not short or b * h * m <= wave:
        return None
    block_n = hopper_gather_config(head_dim, group, short, entry_keys=entry_keys)["block_n"]
    keys = counts.index_select(2, group_rows(m, block_m, group, counts.shape[2], counts.device))
    work = -(-keys.clamp(min=0) // block_n)
    return lpt_walks(longest_first_order(keys), work, wave, TILE_FIXED_BLOCKS).to(device)


def _column_sparse_params():
    from .attention import attention_params

    return attention_params()


@torch.library.custom_op("cute_kernels::column_sparse_attention", mutates_args=())
def _column_sparse_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                indices: torch.Tensor, counts: torch.Tensor,
                                base: torch.Tensor | None, group: int, scale: float,
                                out_scale: float, entry_keys: int = 1,
                                list_keys: int | None = None,
                                walks: torch.Tensor | None = None,
                                full_counts: torch.Tensor | None = None,
                                doc_ids: torch.Tensor | None = None, mask_key: int = 0
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    return _column_sparse_attention(q, k, v, indices, counts, base, group, scale, out_scale,
                                    entry_keys, list_keys, walks, full_counts, doc_ids,
                                    mask_key)


@_column_sparse_attention_op.register_fake
def _(q, k, v, indices, counts, base, group, scale, out_scale, entry_keys=1, list_keys=None,
      walks=None, full_counts=None, doc_ids=None, mask_key=0):
    b, h, s_q, _ = q.shape
    return torch.empty_like(q), q.new_empty(b, h, s_q, dtype=torch.float32)


_COLUMN_SPARSE_ATTENTION = KernelOp(_column_sparse_attention_op, _column_sparse_attention,
                                    grad_inputs=("q", "k", "v"))


def column_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            indices: torch.Tensor, counts: torch.Tensor, *, group: int = 192,
                            scale: float | None = None, out: torch.Tensor | None = None,
                            accumulate: bool = False, out_scale: float = 1.0,
                            return_lse: bool = False, validate: bool | None = None):
    """Column-sparse attention: each group of ``group`` query rows attends to its own list of
    key rows (Chipmunk's [192, 1] sparsity), ``softmax(scale * q k_sel^T) v_sel``.

    Kernels: Hopper ``AttentionSm90(gather=True)`` for groups 128 and 192 (K/V rows gathered
    by ``cp.async`` into the swizzled tiles the WGMMA mainloop reads), the Ampere FA2 gather
    kernel otherwise (perf/RESULTS.md: 12.1x SDPA-cuDNN at 93% sparsity, B1 H24 S118784 D128
    on an H100). When the query tiles outnumber the SMs the CTAs take them longest list first
    (a device-side argsort of the counts, no sync). The float32 reference
    ``cute_kernels.reference.column_sparse_attention`` computes the result on any device.
    ``accumulate`` adds in the kernel's epilogue: a TMA reduce-add store on Hopper, a
    read-modify-write by the CTA that owns the tile on Ampere (each output element has one
    writer). Forward only.

    Args:
        q: (B, H, S_q, D) queries, bfloat16 or float16, on a CUDA device; D is 64 or 128.
            q, k and v follow :func:`cute_kernels.attention`'s rules (strides, GQA).
        k: (B, H_kv, S_kv, D) keys, q's dtype; H a multiple of H_kv.
        v: (B, H_kv, S_kv, D) values.
        indices: int32 (B, H, ceil(S_q / group), L), L >= 1: query group g of head h attends
            to the key rows ``indices[b, h, g, :counts[b, h, g]]``, in any order; a row
            listed twice counts twice in the softmax. Entries past the count are not read.
        counts: int32 (B, H, ceil(S_q / group)), each in [0, L]; any value (not only
            multiples of the key tile). A count of 0 gives o = 0 and lse = -inf.
        group: query rows per index list: 64, 128 or 192 (default).
        scale: the logits' factor, a finite number > 0; None (default) is 1 / sqrt(D).
        out: optional tensor of q's shape and dtype (unit-stride head dim, 16-byte strides),
            not overlapping the inputs: the result is written into it (required with
            ``accumulate``).
        accumulate: add ``out_scale * attention`` onto ``out`` instead of overwriting it
            (the cross-step delta ``o = o_cache + csp(q, k, v)``).
        out_scale: the factor of the attention written or added, a finite number (default
            1.0); lse is not scaled.
        return_lse: also return the log-sum-exp.
        validate: check the index values first (one device sync; module docstring); None
            (default) follows ``CUTE_KERNELS_VALIDATE``.

    Returns:
        o (B, H, S_q, D) in q's dtype (``out`` itself when given); with ``return_lse``,
        ``(o, lse)`` where lse (B, H, S_q) float32 is the natural-log log-sum-exp of each
        row's scaled logits over its list (-inf for an empty list).

    Raises:
        TypeError: a non-tensor, a dtype rule broken (q/k/v bfloat16 or float16 alike,
            indices and counts int32, out q's dtype), a non-bool ``accumulate``, a
            ``scale`` or ``out_scale`` that is not a number.
        ValueError: a shape rule broken (q/k/v as :func:`cute_kernels.attention`, indices
            (B, H, G, L >= 1), counts (B, H, G)), ``group`` not 64/128/192, no ``out`` with
            ``accumulate``, a bad or overlapping ``out``, tensors on different devices or on
            the CPU; in validate mode, a count outside [0, L] or an index outside [0, S_kv).
        NotImplementedError: inputs that require grad under grad mode.
    """
    scale, out_scale = validate_column_sparse(q, k, v, indices, counts, group, scale, out,
                                              accumulate, out_scale)
    if value_checks(validate):
        validate_indices(indices, counts, k.shape[2])
    o, lse = _COLUMN_SPARSE_ATTENTION(q, k, v, indices, counts, out if accumulate else None,
                                      group, scale, out_scale, out=out)
    return (o, lse) if return_lse else o


# ---------------------------------------------------------------------------------------------
# Index builders: (indices, counts) from a mask or from scores. On CUDA tensors kernels write
# the lists (column_indices: ops/column_lists.py; topk_indices: ops/topk.py); the vectorised
# torch paths (any device, the CPU's) are the reference-grade ones.


def _row_chunks(rows: int, n: int):
    step = max(1, CHUNK_ELEMENTS // max(n, 1))
    return ((start, min(start + step, rows)) for start in range(0, rows, step))


def _padded(counts: torch.Tensor, multiple_of: int, n: int) -> torch.Tensor:
    """min(ceil(count / multiple_of) * multiple_of, n)."""
    return ((counts + multiple_of - 1) // multiple_of * multiple_of).clamp_(max=n)


def _partition(sel: torch.Tensor, counts: torch.Tensor, length: int) -> torch.Tensor:
    """Per row of ``sel`` (R, N) bool: the selected columns in increasing order, then the
    unselected ones in increasing order, the first ``length`` (<= N) of them, int32 (R, length).
    One cumsum and one scatter (stream compaction); ``counts`` (R,) = sel.sum(1)."""
    r, n = sel.shape
    cols = torch.arange(n, device=sel.device)
    before = sel.cumsum(1)  # selected columns at or before each column
    dest = torch.where(sel, before - 1, counts.unsqueeze(1) + cols - before)
    dest = dest.clamp_(max=length)  # past ``length``: one scratch column, dropped
    out = torch.empty(r, length + 1, dtype=INDEX_DTYPE, device=sel.device)
    out.scatter_(1, dest, cols.to(INDEX_DTYPE).expand(r, n))
    return out[:, :length]


_POPCOUNT: dict[tuple[torch.device, int], torch.Tensor] = {}


def _popcount_table(device: torch.device, bits: int) -> torch.Tensor:
    """uint8 (2^bits,): the set bits of each ``bits``-bit value (built once per device)."""
    table = _POPCOUNT.get((device, bits))
    if table is None:
        values = torch.arange(1 << bits, dtype=torch.int32)
        table = sum((values >> b) & 1 for b in range(bits)).to(torch.uint8).to(device)
        _POPCOUNT[device, bits] = table
    return table


def _packed_counts(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Set bits of each row of a bitpacked mask (..., ceil(n / 8)), bits past ``n`` ignored;
    int64 (...). One table lookup per 16-bit word where the rows view as int16 (an even byte
    count), else per byte, with int32 indices (a negative int16 indexes from the table's end:
    the same 16 bits); the bits past ``n`` in each row's last byte are counted and subtracted,
    so the mask is never copied."""
    words = None
    if packed.shape[-1] % 2 == 0:
        try:
            words = packed.view(torch.int16)
        except RuntimeError:  # strides or offset not word-aligned
            pass
    if words is not None:
        counts = _popcount_table(packed.device, 16)[words.int()].sum(-1, dtype=torch.int32)
    else:
        counts = _popcount_table(packed.device, 8)[packed.int()].sum(-1, dtype=torch.int32)
    if n % 8:
        past = (packed[..., -1] >> (n % 8)).int()
        counts -= _popcount_table(packed.device, 8)[past]
    return counts.long()  # int32 sums (a count is < 2^31), int64 for the padding arithmetic


def _check_multiple_of(multiple_of) -> int:
    return check_int("multiple_of", multiple_of, min_value=1)


def _check_mask_arg(mask, n) -> tuple[bool, int]:
    """(packed?, N) for :func:`column_indices`' mask and n."""
    check_tensor("mask", mask, dtypes=(torch.bool, torch.uint8), min_ndim=1, on_cuda=False)
    if mask.dtype == torch.bool:
        if n is not None and (isinstance(n, bool) or n != mask.shape[-1]):
            raise ValueError(f"n must be None or mask.shape[-1] = {mask.shape[-1]} for a bool "
                             f"mask, got {n!r}")
        length = mask.shape[-1]
    else:
        if n is None:
            raise ValueError("n (the number of key columns, S_kv) is required for a bitpacked "
                             "uint8 mask")
        length = check_int("n", n, min_value=1)
        if mask.shape[-1] != packed_width(length):
            raise ValueError(f"a bitpacked mask must have shape[-1] = ceil(n / 8) = "
                             f"{packed_width(length)} for n = {length}, got {mask.shape[-1]}")
    if length < 1:
        raise ValueError("mask must have at least one key column (S_kv >= 1)")
    return mask.dtype == torch.uint8, length


def _kernel_lists(packed: torch.Tensor, n: int, multiple_of: int, lead: torch.Size
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`column_indices` of a bitpacked CUDA mask (..., ceil(n / 8)) by the two
    column-list kernels (ops/column_lists.py): the rows' counts, padded counts and their
    maximum (one kernel), L read from that maximum (the one sync), then the lists kernel
    writes each row's selected columns and, after them, its unselected ones up to L (so a
    padded count counts into the lowest unselected columns, as the torch compaction)."""
    rows = packed.reshape(-1, packed.shape[-1])  # checked by column_indices
    counts, padded, largest = counts_unchecked(rows, n, multiple_of)
    width = max(1, int(largest.item()))  # the one sync: the output's size
    indices = lists_unchecked(rows, counts, n, width)
    return indices.view(*lead, width), padded.view(lead)


def column_indices(mask: torch.Tensor, *, group: int = 192, multiple_of: int = 1,
                   n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The index lists of a column mask: the ``(indices, counts)`` that
    :func:`column_sparse_attention` reads.

    On a CUDA device, two warp-per-row kernels (kernels/column_lists.py via
    ops/column_lists.py) read the bitpacked mask: one counts each row's selected columns
    (popc) and the largest padded count, one writes the lists (per 1024-column chunk a shuffle
    scan of the lanes' popcounts, set bits staged in shared memory, coalesced stores); a bool
    mask is packed first by :func:`cute_kernels.pack_mask`, which reads it once, so both
    kernels read the 8x smaller mask. Elsewhere (the CPU) vectorised torch: one cumsum-based stream
    compaction over all rows (in chunks of ~16M mask entries to bound memory; no loop over
    rows), the reference-grade implementation; both give the same lists, bit for bit
    (tests/test_column_lists_gpu.py holds them to :func:`column_indices_reference`). Either
    way one device sync sizes the output.

    Row layout: ``indices[..., :c]`` are the selected columns in increasing order, followed by
    the unselected columns in increasing order up to L. So every entry is a valid column
    (0 <= index < S_kv, no duplicates in a list), whatever a reader does past the count, and
    with ``multiple_of`` = m > 1 a count c becomes ``min(ceil(c / m) * m, S_kv)``: the list
    is padded with the lowest-numbered unselected columns (Chipmunk pads for tile alignment
    the same way; they then really are attended to).

    Args:
        mask: the selected key columns of each query group: bool (B, H, G, S_kv) (True =
            selected), or its bitpacked form uint8 (B, H, G, ceil(S_kv / 8)) from
            :func:`cute_kernels.pack_mask` (then ``n`` is required; bits past ``n`` are
            ignored). Any leading shape and strides, any device; the outputs keep the
            shape.
        group: the query rows per mask row, 64, 128 or 192 (default): checked only (the
            mask already has one row per group), so the call states the grouping its lists
            are for.
        multiple_of: pad each count up to a multiple of this (int >= 1, default 1: no
            padding), capped at S_kv.
        n: S_kv, the number of mask columns: required for a bitpacked mask; for a bool
            mask None or ``mask.shape[-1]``.

    Returns:
        ``(indices, counts)``: indices int32 (..., L) with L = the largest (padded) count,
        at least 1 and at most S_kv; counts int32 (...), mask's device.

    Raises:
        TypeError: ``mask`` not a bool or uint8 tensor; ``multiple_of`` or ``n`` not an int.
        ValueError: a 0-d mask, S_kv = 0, a bitpacked mask without ``n`` or whose last dim is
            not ceil(n / 8), a bool mask with another ``n``, ``group`` not 64/128/192,
            ``multiple_of`` < 1.
        UnsupportedGPUError: a CUDA mask on a GPU without a kernel path.
    """
    packed, length = _check_mask_arg(mask, n)
    check_group(group)
    multiple_of = _check_multiple_of(multiple_of)
    lead = mask.shape[:-1]
    if mask.is_cuda:
        return _kernel_lists(mask if packed else pack_mask(mask), length, multiple_of, lead)
    rows = mask.reshape(-1, mask.shape[-1])
    r = rows.shape[0]
    counts = _packed_counts(rows, length) if packed else rows.sum(1, dtype=torch.int64)
    padded = _padded(counts, multiple_of, length)
    width = max(1, int(padded.max())) if r else 1  # the one sync: the output's size
    indices = torch.empty(r, width, dtype=INDEX_DTYPE, device=mask.device)
    for start, stop in _row_chunks(r, length):
        sel = rows[start:stop]
        if packed:
            sel = unpack_mask_reference(sel, length)
        indices[start:stop] = _partition(sel, counts[start:stop], width)
    return indices.view(*lead, width), padded.to(INDEX_DTYPE).view(lead)


def column_indices_reference(mask: torch.Tensor, *, group: int = 192, multiple_of: int = 1,
                             n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`column_indices` by a stable sort (selected columns first): the test oracle."""
    packed, length = _check_mask_arg(mask, n)
    check_group(group)
    multiple_of = _check_multiple_of(multiple_of)
    sel = unpack_mask_reference(mask, length) if packed else mask
    order = torch.argsort((~sel).to(torch.uint8), dim=-1, stable=True)
    padded = _padded(sel.sum(-1, dtype=torch.int64), multiple_of, length)
    width = max(1, int(padded.max())) if padded.numel() else 1
    return order[..., :width].to(INDEX_DTYPE), padded.to(INDEX_DTYPE)


#: Quantile estimation of :func:`topk_indices`: columns sampled per row, and how many standard
#: deviations of the sample's rank error the threshold is lowered by (a row whose candidate set
#: still falls short, probability ~3e-5 at 4, is redone exactly).
TOPK_SAMPLES = 4096
TOPK_Z = 4.0


def _topk_sizes(n: int, k, sparsity, multiple_of, random_fraction) -> tuple[int, int, int]:
    """(top, random, total) columns per row of :func:`topk_indices` (its docstring)."""
    if (k is None) == (sparsity is None):
        raise TypeError("topk_indices takes exactly one of k and sparsity")
    if k is not None:
        k = check_int("k", k, min_value=1)
        if k > n:
            raise ValueError(f"k must be <= N = {n} (the last dim of scores), got {k}")
    else:
        sparsity = _check_real("sparsity", sparsity, "the fraction of columns dropped")
        if not 0 <= sparsity < 1:
            raise ValueError(f"sparsity must be in [0, 1) (the fraction of columns dropped), "
                             f"got {sparsity}")
        k = min(n, max(1, math.ceil((1 - sparsity) * n - 1e-9)))
    multiple_of = _check_multiple_of(multiple_of)
    random_fraction = _check_real("random_fraction", random_fraction,
                                  "extra random columns per top column")
    if random_fraction < 0:
        raise ValueError(f"random_fraction must be >= 0, got {random_fraction}")
    extra = min(round(random_fraction * k), n - k)
    total = min(-(-(k + extra) // multiple_of) * multiple_of, n)
    return total - extra, extra, total


def _check_scores(scores, generator) -> int:
    check_tensor("scores", scores, dtypes=SCORE_DTYPES, min_ndim=1, on_cuda=False)
    if scores.shape[-1] < 1:
        raise ValueError("scores must have at least one column (N >= 1)")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got "
                            f"{type(generator).__name__}")
        if generator.device.type != scores.device.type:
            raise ValueError(f"generator must be on scores' device type "
                             f"({scores.device.type}), got a {generator.device.type} generator")
    return scores.shape[-1]


def _exact_top(x: torch.Tensor, k: int) -> torch.Tensor:
    """bool (R, N): the k largest of each row (torch.topk; NaN counts as largest)."""
    top = x.topk(k, dim=1, sorted=False).indices
    return torch.zeros(x.shape, dtype=torch.bool, device=x.device).scatter_(1, top, True)


def _estimated_top(x: torch.Tensor, k: int, generator) -> torch.Tensor:
    """bool (R, N): k columns per row, the k largest unless ties, by quantile estimation.

    Sample s = ``TOPK_SAMPLES`` columns per row (with replacement) and take as threshold the
    sample's j-th largest value, j = s p + z sqrt(s p (1 - p)) + 1 with p = k / N and z =
    ``TOPK_Z``: the number of sampled values above the true k-th largest is Binomial(s, p),
    so the threshold is at or below it (the candidates x >= threshold hold the true top k)
    except with probability ~Phi(-z). The candidates (about k + z N sqrt(p (1 - p) / s)) are
    compacted and the k largest of them kept; a row with fewer than k candidates is redone
    with torch.topk."""
    r, n = x.shape
    samples, z = TOPK_SAMPLES, TOPK_Z  # read per call: tests vary them
    s = min(samples, n)
    p = k / n
    j = max(1, math.floor(s * p + z * math.sqrt(s * p * (1 - p))) + 1)
    if k == n or n <= samples or j >= s:
        return _exact_top(x, k)
    cols = torch.randint(n, (r, s), device=x.device, generator=generator)
    threshold = x.gather(1, cols).kthvalue(s - j + 1, dim=1, keepdim=True).values
    cand = x >= threshold
    found = cand.sum(1)
    width = max(int(found.max()), k)  # a sync: the candidates' buffer
    slot = torch.where(cand, cand.cumsum(1) - 1, width)  # non-candidates: a scratch column
    values = x.new_full((r, width + 1), float("-inf")).scatter_(1, slot, x)
    col_of = torch.full((r, width + 1), -1, dtype=torch.long, device=x.device)
    col_of.scatter_(1, slot, torch.arange(n, device=x.device).expand(r, n))
    chosen = col_of.gather(1, values[:, :width].topk(k, dim=1, sorted=False).indices)
    redo = (found < k) | (chosen < 0).any(1)  # short rows (their -inf padding was chosen)
    sel = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    sel.scatter_(1, chosen.clamp(min=0), True)
    redo_rows = redo.nonzero().squeeze(1)
    if redo_rows.numel():
        sel[redo_rows] = _exact_top(x[redo_rows], k)
    return sel


def _add_random(sel: torch.Tensor, extra: int, generator) -> torch.Tensor:
    """``extra`` more columns per row, uniformly from the unselected ones, without
    replacement (``torch.multinomial``)."""
    if extra:
        pick = torch.multinomial((~sel).float(), extra, replacement=False, generator=generator)
        sel.scatter_(1, pick, True)
    return sel


def _topk_lists(scores, k, sparsity, multiple_of, random_fraction, generator, top_rows):
    n = _check_scores(scores, generator)
    top, extra, total = _topk_sizes(n, k, sparsity, multiple_of, random_fraction)
    lead = scores.shape[:-1]
    rows = scores.reshape(-1, n)
    kernel_top = None
    if top_rows is _estimated_top and (scores.is_cuda or is_meta(scores)):
        # the radix-select kernel writes the increasing lists itself (ops/topk.py)
        kernel_top = topk_rows(rows, top)
        if extra == 0:
            full = torch.full((rows.shape[0],), total, dtype=INDEX_DTYPE, device=scores.device)
            return kernel_top.view(*lead, total), full.view(lead)
    indices = torch.empty(rows.shape[0], total, dtype=INDEX_DTYPE, device=scores.device)
    full = torch.full((rows.shape[0],), total, dtype=torch.long, device=scores.device)
    for start, stop in _row_chunks(rows.shape[0], n):
        if kernel_top is not None:  # the kernel's top set, then the random columns in torch
            sel = torch.zeros(stop - start, n, dtype=torch.bool, device=scores.device)
            sel.scatter_(1, kernel_top[start:stop].long(), True)
        else:
            sel = top_rows(rows[start:stop].float(), top, generator)
        indices[start:stop] = _partition(_add_random(sel, extra, generator), full[start:stop],
                                         total)
    return indices.view(*lead, total), full.to(INDEX_DTYPE).view(lead)


def topk_indices(scores: torch.Tensor, k: int | None = None, *, sparsity: float | None = None,
                 multiple_of: int = 1, random_fraction: float = 0.0,
                 generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (approximately) k largest columns of each row of ``scores``, as index lists for
    :func:`column_sparse_attention` (e.g. from :func:`cute_kernels.attention_colsum`'s sums).

    On a CUDA device without random columns: one CTA per row (kernels/topk.py). On rows of
    at least 8192 columns it samples 2048 scores, takes a threshold a few standard
    deviations below the sample's (1 - k / N) quantile, reads the row once to gather the
    scores above it (with their columns) into shared memory, and there finds the k-th
    largest by a radix select and writes the selected columns in order; a row whose
    candidates miss the top k or overflow the buffer (probability ~3e-5, or heavy ties)
    runs the plain radix select instead, as do short rows (the k-th largest value found byte
    by byte from shared-memory histograms, two passes over a 16-bit row, four over float32,
    then one pass that writes the selected columns). Exact either way: ties at the k-th
    value keep the lowest columns. Random columns, when asked for, are added to that set in
    torch. On the CPU quantile estimation
    in torch instead of a sort: sample
    4096 columns per row, take a threshold a little below the sample's (1 - k / N) quantile so
    that the candidates above it hold the true top k (but for probability ~3e-5 per row, and
    such a row is redone with ``torch.topk``), then keep the k largest candidates. Either way
    the top set is exact up to ties; which of several equal scores is kept is not promised.

    Every row gets the same count: ``total = min(ceil((k + r) / multiple_of) *
    multiple_of, N)`` columns, the top ``total - r`` scores (padding for ``multiple_of``
    takes the next-best columns) and ``r = min(round(random_fraction * k), N - k)`` random
    ones drawn uniformly from the rest (as Chipmunk adds random columns). Each list is in
    increasing column order, no duplicates.

    Args:
        scores: float32, bfloat16 or float16 (..., N), N >= 1, any device; compared in
            float32. NaN counts as largest (as in ``torch.topk``).
        k: the columns to keep per row, 1 <= k <= N. Exactly one of ``k`` and ``sparsity``.
        sparsity: the fraction of columns dropped, in [0, 1): k = ceil((1 - sparsity) N).
        multiple_of: round each count up to a multiple of this (int >= 1), capped at N.
        random_fraction: extra random columns per top column (>= 0; 0.0: none).
        generator: the ``torch.Generator`` (on scores' device) of the column sample and the
            random columns; None uses torch's default.

    Returns:
        ``(indices, counts)``: indices int32 (..., total), counts int32 (...) all equal to
        total, on scores' device.

    Raises:
        TypeError: a non-tensor or a dtype not float32/bfloat16/float16, both or neither of
            ``k`` and ``sparsity``, a ``k``/``multiple_of`` that is not an int, a
            ``sparsity``/``random_fraction`` that is not a number, a ``generator`` that is
            not a ``torch.Generator``.
        ValueError: a 0-d ``scores`` or N = 0, k outside [1, N], sparsity outside [0, 1),
            ``multiple_of`` < 1, a negative or non-finite ``random_fraction``, a
            ``generator`` on another device type.
    """
    return _topk_lists(scores, k, sparsity, multiple_of, random_fraction, generator,
                       _estimated_top)


def topk_indices_reference(scores: torch.Tensor, k: int | None = None, *,
                           sparsity: float | None = None, multiple_of: int = 1,
                           random_fraction: float = 0.0,
                           generator: torch.Generator | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`topk_indices` with the top set from ``torch.topk`` (the recall baseline); the
    same sizes, order and random columns' rule."""
    return _topk_lists(scores, k, sparsity, multiple_of, random_fraction, generator,
                       lambda x, top, gen: _exact_top(x, top))
