"""Dense flash attention (``attention``) and its column-sum variant (``attention_colsum``):
argument rules, float32 references, kernel configuration and the torch entry points.

Layout: q (B, H, S_q, D), k and v (B, H_kv, S_kv, D) — the layout of
``scaled_dot_product_attention`` — with any strides whose last dim is unit-stride, so a
(B, S, H, D) tensor passed as ``.transpose(1, 2)`` needs no copy. GQA/MQA: H % H_kv == 0, query
head h reads kv head ``h // (H // H_kv)``.

Causal masks are aligned **bottom-right** (FlashAttention's convention): query i may attend key
j iff ``j <= i + S_kv - S_q``. With S_q == S_kv that is the usual lower triangle; with S_q < S_kv
(decoding with a cache) the queries are the last S_q positions. A query row with no visible key
(S_q > S_kv) gets o = 0 and lse = -inf.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import NamedTuple

import torch

from ..kernels.attention.tiles import (
    HOPPER_DEFAULT_TILE,
    MAX_CLUSTER_SPLITS,
    colsum_spans_ctas,
)
from ..runtime.arch import (
    HOPPER,
    cluster_capacity,
    device_target,
    forced_path,
    hbm_gbps,
    sm_count,
    target_has_pdl,
)
from ..runtime.bridge import kernel_for
from ..runtime.validate import (
    check_cuda,
    check_int,
    check_no_overlap,
    check_same_device,
    check_tensor,
    remember_plan,
    tensor_meta,
)
from ..tuning import attention as attention_tuning
from ..tuning.attention import (
    PERSISTENT_MAX_KEYS,
    SHORT_QUERY_ROWS,
    TALL_TILE_MIN_SEQ,
    TALL_TURNS,
    ampere_config,
    decode_rows,
    hopper_config,
)
from .attention_splits import auto_splits, query_tiles
from .dispatch import KernelOp, plain_eager

IN_DTYPES = (torch.bfloat16, torch.float16)
HEAD_DIMS = (64, 128)
COLSUM_GROUPS = (128, 192)


def validate_attention(q, k, v, scale=None) -> float:
    """Check q, k, v against the rules in the module docstring; return the softmax scale."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, dtypes=IN_DTYPES, ndim=4, on_cuda=False)
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a unit-stride last (head) dim, got strides "
                             f"{tuple(t.stride())}")
        for dim, s in enumerate(t.stride()[:-1]):
            if t.shape[dim] > 1 and (s * t.element_size()) % 16:
                raise ValueError(f"{name}'s stride {s} in dim {dim} is not a multiple of 16 "
                                 f"bytes (TMA/vector loads)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    b, h, s_q, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    bk, h_kv, s_kv, dk = k.shape
    if bk != b or dk != d:
        raise ValueError(f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)} in "
                         f"batch or head dim")
    if d not in HEAD_DIMS:
        raise ValueError(f"head dim must be one of {HEAD_DIMS}, got {d}")
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"the number of query heads ({h}) must be a multiple of the kv "
                         f"heads ({h_kv})")
    if s_q < 1 or s_kv < 1:
        raise ValueError(f"sequence lengths must be >= 1, got S_q = {s_q}, S_kv = {s_kv}")
    if len({q.device, k.device, v.device}) > 1:
        raise ValueError("q, k and v must be on the same device")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        hint = " (pass a 0-d tensor as scale.item())" if isinstance(scale, torch.Tensor) else ""
        raise TypeError(f"scale must be a number (a float > 0, or None for 1 / sqrt(D)), got "
                        f"{type(scale).__name__} {scale!r}{hint}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return float(scale)


def validate_colsum(q, prev_lse, group) -> None:
    b, h, s_q, _ = q.shape
    check_tensor("prev_lse", prev_lse, dtypes=(torch.float32,), ndim=3, on_cuda=False)
    if tuple(prev_lse.shape) != (b, h, s_q):
        raise ValueError(f"prev_lse must have shape {(b, h, s_q)}, got {tuple(prev_lse.shape)}")
    if isinstance(group, bool) or not isinstance(group, int) or group not in COLSUM_GROUPS:
        raise ValueError(f"group must be one of {COLSUM_GROUPS} (query rows per column sum), "
                         f"got {group!r}")


def _expand_kv(t: torch.Tensor, heads: int) -> torch.Tensor:
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def _logits(q, k, causal: bool, scale: float) -> torch.Tensor:
    """fp32 ``scale * q k^T`` with the causal (bottom-right) mask applied as -inf."""
    s = torch.matmul(q.float(), _expand_kv(k, q.shape[1]).float().transpose(-1, -2)) * scale
    if causal:
        s_q, s_kv = q.shape[-2], k.shape[-2]
        i = torch.arange(s_q, device=q.device)[:, None]
        j = torch.arange(s_kv, device=q.device)[None, :]
        s = s.masked_fill(j > i + (s_kv - s_q), float("-inf"))
    return s


def attention_reference(q, k, v, *, causal: bool = False, scale: float | None = None):
    """(o fp32 (B, H, S_q, D), lse fp32 (B, H, S_q), natural log)."""
    scale = validate_attention(q, k, v, scale)
    s = _logits(q, k, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)  # fully masked rows: p = 0
    o = torch.matmul(p, _expand_kv(v, q.shape[1]).float())
    return o, lse


def torch_attention(q, k, v, *, causal: bool = False) -> torch.Tensor:
    """torch's own SDPA in the inputs' dtype under the same (GQA, bottom-right causal, o = 0
    for rows with no key) conventions: the accuracy baseline of the tests."""
    mask = None
    if causal:
        s_q, s_kv = q.shape[-2], k.shape[-2]
        i = torch.arange(s_q, device=q.device)[:, None]
        mask = torch.arange(s_kv, device=q.device)[None, :] <= i + (s_kv - s_q)
    rep = q.shape[1] // k.shape[1]
    o = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask)
    if mask is not None:  # some SDPA backends average over fully masked rows instead of NaN
        o = o.masked_fill(~mask.any(-1)[:, None], 0.0)
    return o.nan_to_num(0.0)


def attention_colsum_reference(q, k, v, prev_lse, *, group: int = 192,
                               scale: float | None = None):
    """(o, lse, colsum): ``colsum[b, h, g, j] = sum_{i in query group g}
    exp(scale * q_i . k_j - prev_lse[b, h, i])`` in fp32, shape (B, H, ceil(S_q / group),
    S_kv) — softmax probabilities under the previous step's normalisers."""
    scale = validate_attention(q, k, v, scale)
    validate_colsum(q, prev_lse, group)
    o, lse = attention_reference(q, k, v, scale=scale)
    p_prev = torch.exp(_logits(q, k, False, scale) - prev_lse.float().unsqueeze(-1))
    b, h, s_q, s_kv = p_prev.shape
    groups = -(-s_q // group)
    padded = torch.zeros(b, h, groups * group, s_kv, device=q.device)
    padded[:, :, :s_q] = p_prev
    return o, lse, padded.view(b, h, groups, group, s_kv).sum(dim=3)


def colsum_adds_onto_zeros(path: str, head_dim: int, group: int,
                           config: dict | None = None) -> bool:
    """Whether the column-sum kernel of ``path`` adds partial sums into a zeroed output
    (Ampere always; Hopper when a group spans two CTAs). ``config``: Hopper overrides."""
    return path != "hopper" or _hopper_colsum_atomic(head_dim, group, _config_key(config))


@functools.cache
def _hopper_colsum_atomic(head_dim: int, group: int, config_key: tuple) -> bool:
    # cached: attention_colsum asks on every call, and the answer is a property of the config
    cfg = dict(config_key) if config_key else hopper_config(head_dim, False, True, group)
    return colsum_spans_ctas(group, cfg.get("block_m"))


def make_build(path: str, dtype, head_dim: int, causal: bool, colsum: bool = False,
               group: int = 192, config: dict | None = None, split_kv: bool = False,
               short_query: bool = False, persistent: bool = False,
               combine_pdl: bool | None = None, tall: bool = False, cluster_splits: int = 1,
               decode_rows: int = 0):
    """The attention kernel of ``path`` against symbolic (B, H, S, D) tensors (unit-stride head
    dim, other strides multiples of 8 elements), a compact fp32 lse and, for the column-sum
    variant, compact fp32 prev_lse (B, H, S_q) and colsum (B, H, G, S_kv). ``config``
    overrides the Hopper kernel's keyword arguments (tuning and tests); ``split_kv``: the
    split-KV variant (o and lse with n_splits x B batch entries); ``short_query``: the Hopper
    tile for at most 64 query rows; ``persistent``: its persistent schedule; ``tall``: on
    192-row tiles at D = 64 (all ``hopper_config``, chosen by ``make_plan``).
    ``combine_pdl`` (with ``split_kv``; None: not): the split launch and the combine kernel's
    in one host function (``SplitKVAttention``), the combine a programmatic dependent launch
    when True. ``cluster_splits`` n > 1 (Hopper, with ``split_kv`` and ``short_query``): the n
    splits of a tile are one cluster that combines them (o and lse have B batch entries).
    ``decode_rows`` R > 0 (Hopper, with ``short_query``): the swap-AB decode kernel on tiles
    of R query rows."""
    import cutlass

    from ..runtime.bridge import fake_bhsd, fake_compact
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    def bhsd():
        return fake_bhsd(dtype, head_dim)

    def f32(rank):
        return fake_compact(torch.float32, rank)

    if path == "hopper":
        cfg = (hopper_config(head_dim, causal, colsum, group, split_kv, short_query, persistent,
                             tall, cluster_splits, decode_rows) if config is None else config)
        kernel = hopper_kernel(head_dim, causal, cfg, split_kv)
    else:
        from ..kernels.attention.sm80 import AttentionSm80

        # the column-sum variant keeps the kernel's default warps (its sums' registers)
        cfg = {} if colsum else ampere_config(head_dim)
        kernel = AttentionSm80(head_dim, causal, colsum=colsum, group=group, **cfg,
                               **({"split_kv": True} if split_kv else {}))
    if combine_pdl is not None:
        from ..kernels.attention.split_combine import SplitCombine
        from ..kernels.attention.split_kv import SplitKVAttention

        joint = SplitKVAttention(kernel, SplitCombine(head_dim, pdl=combine_pdl))
        return Build(joint, launch_args(
            joint, mQ=bhsd(), mK=bhsd(), mV=bhsd(), mOParts=bhsd(), mLseParts=f32(3),
            mO=bhsd(), mLSE=f32(3), scale=cutlass.Float32(1.0)))
    prev_lse, colsums = (f32(3), f32(4)) if colsum else (None, None)
    return Build(kernel, launch_args(
        kernel, mQ=bhsd(), mK=bhsd(), mV=bhsd(), mO=bhsd(), mLSE=f32(3), mPrevLSE=prev_lse,
        mColsum=colsums, mIndices=None, mCounts=None, scale=cutlass.Float32(1.0),
        out_scale=None, **schedule_args(kernel)))


def hopper_kernel(head_dim: int, causal: bool, cfg: dict, split_kv: bool):
    """The Hopper attention kernel of configuration ``cfg``: the swap-AB decode kernel where
    it names ``decode_rows`` (``DecodeSm90``, query rows as the MMA's N), else
    ``AttentionSm90``."""
    split = {"split_kv": True} if split_kv else {}
    if "decode_rows" in cfg:
        from ..kernels.attention.decode_sm90 import DecodeSm90

        rest = {k: v for k, v in cfg.items() if k != "decode_rows"}
        return DecodeSm90(head_dim, causal, rows=cfg["decode_rows"], **rest, **split)
    from ..kernels.attention.sm90 import AttentionSm90

    return AttentionSm90(head_dim, causal, **cfg, **split)


def schedule_args(kernel) -> dict:
    """The fake arguments of a persistent Hopper kernel's schedule (the tile order and the
    CTA count); none for the one-CTA-per-tile kernels."""
    if not getattr(kernel, "persistent", False):
        return {}
    import cutlass

    from ..runtime.bridge import fake_vector

    return {"mFullIndices": None, "mFullCounts": None, "mDocIds": None,
            "mTileOrder": fake_vector(torch.int32, align=4), "num_ctas": cutlass.Int32(1)}


#: The attention kernel classes, as ``"module:Class"`` (the column-sparse op calls them too).
ATTENTION_KERNELS = ("cute_kernels.kernels.attention.sm90:AttentionSm90",
                     "cute_kernels.kernels.attention.sm80:AttentionSm80",
                     "cute_kernels.kernels.attention.decode_sm90:DecodeSm90")


SPLIT_KV_KERNEL = "cute_kernels.kernels.attention.split_kv:SplitKVAttention"


#: The tensors an attention launch passes per call, its kernels' first parameters (the rest
#: are bound in the plan: ``AttentionPlan.args``); the split launch with its combine's.
LEADING = ("mQ", "mK", "mV", "mO", "mLSE")
SPLIT_LEADING = ("mQ", "mK", "mV", "mOParts", "mLseParts", "mO", "mLSE")


@functools.cache
def split_kv_params():
    """The runtime parameters of the split-KV launch with its combine (``SplitKVAttention``)."""
    from ..runtime.launch import kernel_params

    return kernel_params(SPLIT_KV_KERNEL)


@functools.cache
def attention_params():
    """The runtime parameters shared by both paths' attention kernels (named by path, so a
    call never imports the DSL: :mod:`~cute_kernels.runtime.launch`)."""
    from ..runtime.launch import kernel_params

    return kernel_params(*ATTENTION_KERNELS)


def _check_device_args(**tensors) -> None:
    """On one CUDA device; q/k/v 16-byte aligned (TMA descriptors and 16-byte vector loads)."""
    for name, t in tensors.items():
        check_cuda(name, t)
        if name in ("q", "k", "v", "out") and t.data_ptr() % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary")
    check_same_device(**tensors)


def _config_key(config: dict | None) -> tuple:
    return () if config is None else tuple(sorted(config.items()))


def _attention(q, k, v, causal: bool = False, scale: float | None = None,
               num_splits: int = 1, out=None, config: dict | None = None):
    """The direct route, after ``validate_attention``: (o, lse) from the path's kernel;
    ``scale`` None is 1 / sqrt(D); ``config``: Hopper kernel overrides (tests, tuning).
    o takes q's memory layout (``empty_like``) unless ``out`` is given. ``num_splits`` > 1:
    split-KV (:class:`AttentionPlan`)."""
    _check_device_args(q=q, k=k, v=v, **({"out": out} if out is not None else {}))
    o = _output(q, k, v, out)  # checked before anything launches
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if config is not None:  # tests and tuning: never cached
        return make_plan(q, k, causal, scale, num_splits, config).run(q, k, v, o)
    key = _plan_key(q, k, v, causal, scale, num_splits, out)
    plan = _PLANS.get(key)
    if plan is None:
        plan = make_plan(q, k, causal, scale, num_splits)
        if key is not None:
            remember_plan(_PLANS, key, plan)
    return plan.run(q, k, v, o)


class AttentionPlan(NamedTuple):
    """What one attention call launches, worked out once per shape (:func:`make_plan`):
    repeat eager calls with the same metadata run it straight (:func:`attention`), so a
    decode step pays a few µs of Python instead of the checks and decisions again.

    * ``pack``: GQA query heads packed into shared tiles (:func:`packs_query_heads`): q
      (B, H, S_q, D) runs as (B, H_kv, (H / H_kv) S_q, D), row ``j S_q + s`` of KV head g
      being query head ``g (H / H_kv) + j``'s row s (a view of a contiguous q, else a copy),
      through the same kernels without GQA; o and lse are viewed back. K and V are read once
      per KV head instead of once per query head.
    * ``splits`` > 1: split-KV (flash-decoding): the key blocks of every query tile are cut
      into that many ranges (at most one per 128 keys), each CTA writes its partial (O in q's
      dtype, lse) into a workspace with ``splits x B`` batch entries, and the partials are
      combined in float32 (the ``SplitCombine`` kernel, or ``combine_splits`` in torch with
      ``SPLIT_COMBINE_KERNEL_ON`` off): lse = logsumexp over splits, O = sum of
      exp(lse_s - lse) O_s (a split that saw no key weighs nothing). For few query tiles and
      long keys (decoding), where one CTA per tile leaves most SMs idle.
    * ``order``, ``ctas``: a persistent Hopper kernel's tile order and grid (unpacked,
      unsplit launches of D = 64, of causal D = 128 and of non-causal D = 128 with at most
      ``PERSISTENT_MAX_KEYS`` keys, or a ``config`` that asks).
    """

    kernel: object  # the compiled attention kernel (TVM-FFI function)
    pack: tuple | None  # (B, H_kv, (H / H_kv) S_q, D) when query heads are packed
    splits: int
    order: torch.Tensor | None = None
    ctas: int | None = None
    joint: bool = False  # the kernel is the split launch and the combine's (SplitKVAttention)
    cluster: bool = False  # the split kernel combines in clusters: no workspace, o and lse direct
    decode_rows: int = 0  # > 0: the swap-AB decode kernel, tiles of that many query rows
    # the kernel's arguments after the per-call tensors (``LEADING`` / ``SPLIT_LEADING``),
    # bound once (``KernelParams.tail``): a launch is ``kernel(q, k, v, o, lse, *args)``
    args: tuple = ()

    def run(self, q, k, v, o, with_lse: bool = True):
        """(o, lse) for q, k, v of the plan's metadata, o written into ``o`` (checked); lse
        is None without ``with_lse`` (the kernel still writes it: the call skips its view
        back from the packed heads)."""
        if self.pack is None:
            return self._launch(q, k, v, o)
        # the kernels write o in place where it has the packed shape as a view (a contiguous
        # out; a fresh o when q itself was viewed), else through one copy
        inner = _packed_view(o, self.pack)
        o_packed, lse = self._launch(q.reshape(self.pack), k, v,
                                     inner if inner is not None else o.new_empty(self.pack))
        if inner is None:
            o.copy_(o_packed.view(o.shape))
        return o, lse.view(o.shape[:3]) if with_lse else None

    def _launch(self, q, k, v, o):
        b, h, s_q, d = q.shape
        n = self.splits
        lse = torch.empty((b, h, s_q), dtype=torch.float32, device=q.device)
        if n == 1 or self.cluster:
            self.kernel(q, k, v, o, lse, *self.args)
            return o, lse
        # the partials' workspace: n x B batch entries
        o_parts = torch.empty((n * b, h, s_q, d), dtype=q.dtype, device=q.device)
        lse_parts = torch.empty((n * b, h, s_q), dtype=torch.float32, device=q.device)
        if self.joint:  # one host call: the split launch, then the combine's
            self.kernel(q, k, v, o_parts, lse_parts, o, lse, *self.args)
            return o, lse
        self.kernel(q, k, v, o_parts, lse_parts, *self.args)
        # SPLIT_COMBINE_KERNEL_ON off: the torch combine
        o_comb, lse = combine_splits(o_parts.view(n, b, h, s_q, d),
                                     lse_parts.view(n, b, h, s_q))
        return o.copy_(o_comb), lse


class AttentionRoute(NamedTuple):
    """How ``attention`` runs a problem of a given shape (``attention_route``; ``make_plan``
    follows it, and ``cute-kernels attention-schedule`` prints it)."""

    pack: tuple | None  # (B, H_kv, (H / H_kv) S_q, D) when GQA query heads share tiles
    causal: bool  # the kernel's mask (packed decoding at S_q = 1 needs none)
    splits: int  # split-KV ranges (1: unsplit)
    short: bool  # at most 64 query rows per tile: the Hopper kernel's 64-row tile
    persistent: bool  # the Hopper kernel's persistent schedule (walks dealt on the host)
    tall: bool  # D = 64, long sequences: 192-row persistent tiles (``TALL_TURNS``)
    # the splits of a tile combine in one cluster through DSMEM (``CLUSTER_COMBINE``)
    cluster: bool = False
    # > 0: the swap-AB decode kernel's tile of that many query rows (``DECODE_SWAP_AB``)
    decode_rows: int = 0

    def hopper_config(self, head_dim: int) -> dict:
        """The Hopper kernel's keyword arguments on this route (``hopper_kernel``)."""
        return hopper_config(head_dim, self.causal, split_kv=self.splits > 1,
                             short_query=self.short, persistent=self.persistent, tall=self.tall,
                             cluster_splits=self.splits if self.cluster else 1,
                             decode_rows=self.decode_rows)

    def describe(self, head_dim: int, path: str = "hopper") -> str:
        """One line for logs and the CLI."""
        parts = []
        if path == "hopper" and self.decode_rows:
            keys = self.hopper_config(head_dim)["block_n"]
            parts.append(f"Hopper swap-AB decode tiles ({self.decode_rows} query rows as the "
                         f"MMA's N, {keys} keys as its M), one consumer warpgroup, one CTA per "
                         f"tile")
        elif path == "hopper":
            cfg = self.hopper_config(head_dim)
            bm = cfg.get("block_m") or HOPPER_DEFAULT_TILE[0]
            bn = cfg.get("block_n") or HOPPER_DEFAULT_TILE[1]
            wgs = bm // 64
            parts.append(f"Hopper {bm} x {bn} tiles, {wgs} consumer warpgroup"
                         + ("s" if wgs > 1 else ""))
            if cfg.get("overlap"):
                parts.append("softmax / MMA overlap")
            if cfg.get("pingpong"):
                parts.append("consumers take turns")
            if cfg.get("persistent"):
                per_sm = cfg.get("ctas_per_sm", 1)
                parts.append(f"persistent, {per_sm} CTA{'s' if per_sm > 1 else ''} per SM "
                             "walking tile lists dealt on the host")
            else:
                parts.append("one CTA per tile" + (", longest first"
                                                   if cfg.get("longest_first") else ""))
        else:
            parts.append("Ampere kernel (cp.async, ldmatrix, mma.sync)"
                         + "".join(f", {k} {v}" for k, v in ampere_config(head_dim).items()))
        if self.pack is not None:
            parts.append(f"GQA: the query heads of a KV head packed into its tiles "
                         f"({self.pack[2]} rows)")
        if self.causal:
            parts.append("causal")
        if self.cluster:
            parts.append(f"split-KV {self.splits} ways, each tile's splits one cluster "
                         f"combining them through DSMEM")
        elif self.splits > 1:
            parts.append(f"split-KV {self.splits} ways + combine kernel")
        return ", ".join(parts)


def split_ranges(num_splits: int, s_kv: int) -> int:
    """The split-KV ranges a launch runs: ``num_splits``, at most one per 128 keys."""
    return max(1, min(num_splits, -(-s_kv // 128)))


def attention_route(b: int, h: int, h_kv: int, s_q: int, s_kv: int, d: int, causal: bool,
                    num_splits: int, hopper, cluster_capacity=None) -> AttentionRoute:
    """The route of an (already validated) attention problem with ``num_splits`` resolved
    (``attention``'s None: :func:`default_splits`). ``hopper``: whether the
    sm_90 path runs it, a bool or a callable asked only where the answer matters (the
    persistent schedule, the cluster combine; ``make_plan``'s device query).
    ``cluster_capacity(n)``: how many clusters of n CTAs (one per SM) the GPU holds at once;
    None (no GPU at hand: the CLI) takes them to fit."""
    pack, asked_causal = None, causal
    if packs_query_heads(h, h_kv, s_q, causal):
        pack, causal = (b, h_kv, (h // h_kv) * s_q, d), False
    n = split_ranges(num_splits, s_kv)
    # at most 64 query rows per tile (decoding): the Hopper kernel's 64-row tile
    short = (pack[2] if pack else s_q) <= SHORT_QUERY_ROWS
    # Hopper, unpacked and unsplit: the persistent schedule, whose producer loads the next
    # tile's Q and K/V during this one: D = 64 always (64-row tiles two CTAs per SM), D = 128
    # causal (the CTAs' walks balance the causal tiles) or with few key blocks per tile
    # (S_kv <= PERSISTENT_MAX_KEYS)
    plain = pack is None and not short and n == 1
    persistent = (plain and (d == 64 or causal or s_kv <= PERSISTENT_MAX_KEYS)
                  and (hopper() if callable(hopper) else bool(hopper)))
    # D = 64 with long queries and keys: 192-row tiles, one CTA per SM (causal with turns)
    tall = (persistent and d == 64 and (TALL_TURNS or not causal)
            and min(s_q, s_kv) >= TALL_TILE_MIN_SEQ)
    # 2-8 splits of 64-row tiles: each tile's splits one cluster that combines them, if all
    # the clusters fit at once (a cluster left for a second wave would double the time)
    cluster = False
    if attention_tuning.CLUSTER_COMBINE and short and 2 <= n <= MAX_CLUSTER_SPLITS:
        tiles = query_tiles(b, h_kv, s_q, h // h_kv, asked_causal, SHORT_QUERY_ROWS)
        cluster = ((hopper() if callable(hopper) else bool(hopper))
                   and (cluster_capacity is None or tiles <= cluster_capacity(n)))
    # a few query rows (decoding): the swap-AB kernel, rows as the MMA's N (one tile per
    # head, as the 64-row tile: the same clusters)
    rows = pack[2] if pack else s_q
    swap = (attention_tuning.DECODE_SWAP_AB and rows <= attention_tuning.DECODE_SWAP_AB_MAX_ROWS
            and (hopper() if callable(hopper) else bool(hopper)))
    return AttentionRoute(pack, bool(causal), n, short, persistent, tall, cluster,
                          decode_rows(rows) if swap else 0)


def make_plan(q, k, causal: bool, scale: float, num_splits: int,
              config: dict | None = None) -> AttentionPlan:
    """The :class:`AttentionPlan` of validated operands (the kernel compiled or found):
    ``attention_route``'s, or with ``config`` (tuning, tests) that Hopper configuration on
    the unpacked problem."""
    b, h, s_q, d = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]

    def hopper():
        return device_target(q.device)[0] == HOPPER

    if config is None:
        route = attention_route(b, h, h_kv, s_q, s_kv, d, causal, num_splits, hopper,
                                lambda n: cluster_capacity(q.device, n))
    else:  # a forced configuration runs the unpacked problem
        n = split_ranges(num_splits, s_kv)
        cluster_splits = config.get("cluster_splits", 1)
        if cluster_splits > 1 and cluster_splits != n:
            raise ValueError(f"config cluster_splits {cluster_splits} must equal the launch's "
                             f"splits ({n}: num_splits, at most one per 128 keys)")
        route = AttentionRoute(None, bool(causal), n, False, False, False, cluster_splits > 1)
    pack, causal, n, short, persistent, tall, cluster, rows = route
    # split-KV with the combine kernel: both launches from one host call (SplitKVAttention);
    # in a cluster (Hopper only, so the key names the path's build) the split kernel combines
    joint, pdl = n > 1 and SPLIT_COMBINE_KERNEL_ON and not cluster, SPLIT_COMBINE_PDL
    key = ("attention", q.dtype, d, bool(causal), *(("split",) if n > 1 else ()),
           *(("with_combine", pdl) if joint else ()))
    kernel = kernel_for(q.device, key, lambda path, target: make_build(
        path, q.dtype, d, bool(causal), config=config, split_kv=n > 1, short_query=short,
        persistent=persistent, combine_pdl=(pdl and target_has_pdl(target)) if joint else None,
        tall=tall, cluster_splits=n if cluster else 1, decode_rows=rows),
        hopper_key=_config_key(config) + (("short_query",) if short else ())
        + (("persistent",) if persistent else ()) + (("tall",) if tall else ())
        + (("cluster", n) if cluster else ()) + (("decode", rows) if rows else ()))
    cfg = config if config is not None else route.hopper_config(d)
    order, ctas = None, None
    if cfg.get("persistent") and n == 1 and hopper():
        order, ctas = dense_tile_order(
            b, h, s_q, s_kv, bool(causal),
            (cfg.get("block_m") or HOPPER_DEFAULT_TILE[0],
             cfg.get("block_n") or HOPPER_DEFAULT_TILE[1]), cfg.get("ctas_per_sm", 1),
            q.device)
    if joint:
        args = split_kv_params().tail(SPLIT_LEADING, scale=float(scale))
    else:
        args = attention_params().tail(
            LEADING, mPrevLSE=None, mColsum=None, mIndices=None, mCounts=None,
            scale=float(scale), out_scale=None, mTileOrder=order, num_ctas=ctas)
    return AttentionPlan(kernel, pack, n, order, ctas, joint, cluster, rows, args)


#: Plans of eager calls by the call's metadata (:func:`_plan_key`): ``attention`` runs a hit
#: without its checks; ``_attention`` fills it (under the resolved scale and splits)
_PLANS: dict = {}


def _plan_key(q, k, v, causal, scale, num_splits, out):
    """The plan cache's key, or None for a call that does not take the eager direct route
    (``plain_eager``) or whose arguments are not plain Python values: everything
    ``attention``'s checks read, so a hit needs none of them, and the SM count the grid is
    sized by (an ``SmPartition`` region changes it)."""
    if (type(causal) is not bool or not (scale is None or type(scale) is float)
            or not (num_splits is None or type(num_splits) is int) or q is None or k is None
            or v is None or not plain_eager((q, k, v, out), (q, k, v))):
        return None
    return (tensor_meta(q), tensor_meta(k), tensor_meta(v), tensor_meta(out), causal, scale,
            num_splits, forced_path(), sm_count(q.device) if q.is_cuda else 0,
            attention_tuning.CLUSTER_COMBINE)


def _output(q, k, v, out):
    """``out`` checked (q's shape and dtype, a unit-stride head dim, 16-byte strides, no
    overlap with the inputs), or a fresh tensor in q's memory layout."""
    if out is None:
        return torch.empty_like(q)
    if (not isinstance(out, torch.Tensor) or out.shape != q.shape or out.dtype != q.dtype
            or out.stride(-1) != 1 or any((st * out.element_size()) % 16
                                          for st in out.stride()[:-1])):
        raise ValueError(f"out must be a {q.dtype} tensor shaped like q {tuple(q.shape)} "
                         f"with a unit-stride head dim and 16-byte strides")
    check_no_overlap("out", out, q, k, v)
    return out


#: Query rows per tile below which GQA query heads are packed into shared tiles (the Hopper
#: tile's 128 rows; the Ampere kernel's 64- or 128-row tiles are no larger)
PACK_BELOW_ROWS = 128


def packs_query_heads(h: int, h_kv: int, s_q: int, causal: bool) -> bool:
    """Whether attention packs the ``h // h_kv`` query heads of each KV head into the same
    query tiles: GQA with fewer query rows than a tile (decoding), where one tile per query
    head re-reads its group's K and V once per head and leaves most rows idle. Causal only at
    S_q = 1 (one row per head sees every key): packed rows would otherwise take the wrong
    diagonal."""
    return h_kv < h and s_q < PACK_BELOW_ROWS and (not causal or s_q == 1)


def _packed_view(o: torch.Tensor, shape) -> torch.Tensor | None:
    """``o`` viewed as ``shape`` (the packed heads' rows), or None where no view exists."""
    try:
        return o.view(shape)
    except RuntimeError:
        return None


_TILE_ORDERS: dict[tuple, torch.Tensor] = {}


def dense_tile_order(b: int, h: int, s_q: int, s_kv: int, causal: bool, tile: tuple,
                     ctas_per_sm: int, device) -> tuple[torch.Tensor, int]:
    """(walks, CTAs) of the persistent Hopper kernel (``config={"persistent": True}``): the
    CTAs' static tile lists in CSR form (``tile_scheduler.balanced_walks``), tiles
    ``(b * H + h) * M + m`` of ``tile`` = (block_m, block_n). Tiles are dealt a chunk of heads
    (about a wave of tiles) at a time, so the CTAs running at once share K/V in L2, longest
    first within a chunk (causal: a head's last query tiles), each to the CTA that frees up
    first by the estimate of ``tile_costs``. Cached per shape and CTA count (a few KiB)."""
    ctas = sm_count(device) * ctas_per_sm  # not cached: SmPartition regions vary it
    key = (b, h, s_q, s_kv, causal, tile, ctas, device)
    hit = _TILE_ORDERS.get(key)
    if hit is None:
        from ..kernels.common.tile_scheduler import balanced_walks

        m = -(-s_q // tile[0])
        costs = tile_costs(m, s_q, s_kv, causal, tile)
        chunk = max(1, ctas // m)  # heads per chunk
        tiles, tile_cost = [], []
        for first in range(0, b * h, chunk):
            group = [(bh * m + i, costs[i]) for bh in range(first, min(first + chunk, b * h))
                     for i in range(m)]
            group.sort(key=lambda tc: -tc[1])  # stable: head after head among equals
            tiles += [t for t, _ in group]
            tile_cost += [c for _, c in group]
        walks = balanced_walks(tiles, tile_cost, ctas)
        hit = torch.tensor(walks, dtype=torch.int32).to(device)
        if len(_TILE_ORDERS) > 256:
            _TILE_ORDERS.clear()
        _TILE_ORDERS[key] = hit
    return hit, min(ctas, b * h * -(-s_q // tile[0]))


#: A query tile's fixed cost (Q load, pipeline fill, epilogue) in key blocks, for the
#: persistent walks' balance
TILE_FIXED_BLOCKS = 2


def tile_costs(m: int, s_q: int, s_kv: int, causal: bool, tile: tuple) -> list[int]:
    """Estimated cost of query tile 0 .. m - 1 of a head: the key blocks it visits (causal:
    bottom-right aligned, so tile i sees keys below (i + 1) block_m + s_kv - s_q) plus
    ``TILE_FIXED_BLOCKS``."""
    block_m, block_n = tile
    costs = []
    for i in range(m):
        keys = min(s_kv, (i + 1) * block_m + s_kv - s_q) if causal else s_kv
        costs.append(max(0, -(-keys // block_n)) + TILE_FIXED_BLOCKS)
    return costs


#: Whether split-KV combines with the kernel (kernels/attention/split_combine.py, one launch)
#: instead of ``combine_splits`` (about ten eager torch ops: ~0.15 ms more per call at
#: B1 S_kv 4k-64k on the H100, perf/RESULTS.md). On since its GPU tests passed (2026-11-23).
SPLIT_COMBINE_KERNEL_ON = True
#: Whether the combine kernel is a programmatic dependent launch of the split kernel where the
#: target has it (sm_90+; ``target_has_pdl``)
SPLIT_COMBINE_PDL = True


def combine_kernel(o_parts, lse_parts, o, lse) -> None:
    """The combine kernel on its own (the op launches it with the split kernel,
    ``SplitKVAttention``): into ``o`` (B, H, S, D, unit-stride D) and ``lse`` (B, H, S) fp32
    from the split partials ``o_parts`` (n B, H, S, D) and ``lse_parts`` (n B, H, S)."""
    d = o.shape[-1]
    kernel = kernel_for(o.device, ("split_combine", o.dtype, d),
                        lambda path, target: make_combine_build(o.dtype, d))
    kernel(*combine_params().call_args(mOParts=o_parts, mLseParts=lse_parts, mO=o, mLSE=lse))


SPLIT_COMBINE_KERNEL = "cute_kernels.kernels.attention.split_combine:SplitCombine"


@functools.cache
def combine_params():
    """The combine kernel's runtime parameters (read from source: no DSL import)."""
    from ..runtime.launch import kernel_params

    return kernel_params(SPLIT_COMBINE_KERNEL)


def make_combine_build(dtype, head_dim: int, pdl: bool = False):
    """The split-KV combine kernel against symbolic partials (n B, H, S, D) / (n B, H, S) and
    outputs (B, H, S, D) (unit-stride D) / (B, H, S); ``pdl``: launched as a programmatic
    dependent of the split kernel (sm_90+)."""
    from ..kernels.attention.split_combine import SplitCombine
    from ..runtime.bridge import fake_bhsd, fake_compact
    from ..runtime.compile import Build
    from ..runtime.launch import launch_args

    kernel = SplitCombine(head_dim, pdl=pdl)
    return Build(kernel, launch_args(
        kernel, mOParts=fake_bhsd(dtype, head_dim), mLseParts=fake_compact(torch.float32, 3),
        mO=fake_bhsd(dtype, head_dim), mLSE=fake_compact(torch.float32, 3)))


def combine_splits(o_parts: torch.Tensor, lse_parts: torch.Tensor):
    """(o fp32, lse) from split-KV partials (n, ...): the softmax over every split's keys
    (the reference of the combine kernel, kernels/attention/split_combine.py)."""
    lse = torch.logsumexp(lse_parts, dim=0)
    weight = torch.exp(lse_parts - lse).nan_to_num_(0.0)  # -inf - -inf: no key anywhere
    return (weight.unsqueeze(-1) * o_parts.float()).sum(0), lse


@torch.library.custom_op("cute_kernels::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  scale: float, num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _attention(q, k, v, causal, scale, num_splits)


@_attention_op.register_fake
def _(q, k, v, causal, scale, num_splits):
    b, h, s_q, _ = q.shape
    return torch.empty_like(q), q.new_empty(b, h, s_q, dtype=torch.float32)


_ATTENTION = KernelOp(_attention_op, _attention, grad_inputs=("q", "k", "v"))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, return_lse: bool = False,
              out: torch.Tensor | None = None, num_splits: int | None = None):
    """Flash attention forward: ``softmax(scale * q k^T [+ causal mask]) v``.

    The layout of ``scaled_dot_product_attention``, with any strides that have a unit-stride
    head dim (the others multiples of 16 bytes), so a (B, S, H, D) tensor passed as
    ``.transpose(1, 2)`` needs no copy. Softmax and accumulation in fp32. Forward only:
    inputs that require grad raise ``NotImplementedError`` under grad mode (use
    ``torch.no_grad()`` or ``.detach()``).

    Args:
        q: (B, H, S_q, D) queries, bfloat16 or float16, on a CUDA device; D is 64 or 128.
        k: (B, H_kv, S_kv, D) keys, q's dtype; H a multiple of H_kv (GQA/MQA: query head
            h reads kv head ``h // (H // H_kv)``); any S_q, S_kv >= 1.
        v: (B, H_kv, S_kv, D) values, k's shape and q's dtype.
        causal: bottom-right aligned mask (FlashAttention's convention): query i sees key
            j iff ``j <= i + S_kv - S_q``; a query that sees no key gets o = 0 and
            lse = -inf.
        scale: the logits' factor, a finite number > 0; None (default) is 1 / sqrt(D).
        return_lse: also return the log-sum-exp.
        out: optional tensor of q's shape and dtype (unit-stride head dim, 16-byte
            strides), not overlapping q, k or v, to write o into.
        num_splits: split-KV (flash-decoding): each query tile's keys are cut into this
            many ranges run by separate CTAs and combined in float32 (for decoding: few
            query rows, long keys; on Hopper 2-8 ranges of a decode tile combine inside the
            split kernel, one thread-block cluster per tile, where the GPU holds all the
            clusters at once). 1: no split. None (default): chosen from the shapes and the
            GPU (``default_splits``: no split below 4,096 keys or once the query tiles fill
            the SMs; timings per n in perf/RESULTS.md "Decode attention").

    Returns:
        o (B, H, S_q, D) in q's dtype and memory layout (``out`` itself when given); with
        ``return_lse``, ``(o, lse)`` where lse (B, H, S_q) float32 is the natural-log
        log-sum-exp of each row's scaled logits.

    Raises:
        TypeError: a non-tensor, a dtype other than bfloat16/float16, q, k and v of
            different dtypes, a non-bool ``causal``, a ``scale`` that is not a number or a
            ``num_splits`` that is not an int.
        ValueError: a shape rule above broken (rank, D, heads, sequence lengths,
            strides), a ``scale`` <= 0 or not finite, ``num_splits`` < 1, a bad or
            overlapping ``out``, or CPU tensors (``cute_kernels.reference.attention`` runs
            anywhere).
        UnsupportedGPUError: a GPU without a kernel path.
    """
    key = _plan_key(q, k, v, causal, scale, num_splits, out)
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:  # a repeat eager call: its metadata passed every check before
        o = torch.empty_like(q) if out is None else out
        if out is not None:  # the one check that reads the data pointers
            check_no_overlap("out", out, q, k, v)
        o, lse = plan.run(q, k, v, o, return_lse)
        return (o, lse) if return_lse else o
    checked_scale = validate_attention(q, k, v, scale)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if num_splits is None:
        splits = _auto_splits(q, k, causal)
    else:
        splits = check_int("num_splits", num_splits, min_value=1)
    o, lse = _ATTENTION(q, k, v, causal, checked_scale, splits, out=out)
    if key is not None:  # the direct route planned it under the resolved scale and splits
        plan = _PLANS.get(_plan_key(q, k, v, causal, checked_scale, splits, out))
        if plan is not None:
            remember_plan(_PLANS, key, plan)
    return (o, lse) if return_lse else o


def _auto_splits(q: torch.Tensor, k: torch.Tensor, causal: bool) -> int:
    """num_splits for ``num_splits=None`` (q and k already validated as attention operands;
    1 off CUDA, where the op refuses them anyway)."""
    if q.device.type != "cuda":
        return 1
    return default_splits(*q.shape, k.shape[1], k.shape[2], causal, sm_count(q.device),
                          lambda: device_target(q.device)[0] == HOPPER,
                          lambda size: cluster_capacity(q.device, size), hbm_gbps(q.device))


def default_splits(b: int, h: int, s_q: int, d: int, h_kv: int, s_kv: int, causal: bool,
                   sms: int, hopper, cluster_capacity=None, hbm: float | None = None) -> int:
    """``num_splits=None``'s split count (``hopper`` and ``cluster_capacity`` as
    :func:`attention_route` takes them; ``hbm``: the GPU's peak GB/s, None unknown):
    ``auto_splits``, except that a count above 8 drops to 8 combined in clusters (where
    those fit) up to ``CLUSTER_SPLITS_MAX_KEYS`` keys, or at any length where their CTAs
    stream as fast as the memory (``tuning.attention.CLUSTER_CTA_GBPS``, or
    ``DECODE_CTA_GBPS`` on the swap-AB decode tile)."""
    n = auto_splits(b, h_kv, s_q, s_kv, sms, q_per_kv=h // h_kv, causal=causal)
    if n <= MAX_CLUSTER_SPLITS:
        return n
    capped = attention_route(b, h, h_kv, s_q, s_kv, d, causal, MAX_CLUSTER_SPLITS, hopper,
                             cluster_capacity)
    if not capped.cluster:
        return n
    # the swap-AB decode tile streams faster per CTA than the 64-row tile
    per_cta = (attention_tuning.DECODE_CTA_GBPS if capped.decode_rows
               else attention_tuning.CLUSTER_CTA_GBPS)
    ctas = MAX_CLUSTER_SPLITS * query_tiles(b, h_kv, s_q, h // h_kv, causal, SHORT_QUERY_ROWS)
    saturates = hbm is not None and ctas * per_cta >= attention_tuning.CLUSTER_HBM_SHARE * hbm
    return (MAX_CLUSTER_SPLITS if s_kv <= attention_tuning.CLUSTER_SPLITS_MAX_KEYS or saturates
            else n)


def attention_colsum(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     prev_lse: torch.Tensor, *, group: int = 192, scale: float | None = None):
    """Non-causal attention plus the column sums that pick the important keys for the
    column-sparse steps (docs/attention.md).

    ``colsum[b, h, g, j] = sum over queries i of group g of exp(scale q_i . k_j -
    prev_lse[b, h, i])``: softmax probabilities under the previous step's normalisers, so
    every tile shares one scale. The sums are deterministic; on Hopper most configurations
    form them on the tensor cores from bf16 probabilities and factors (relative error
    ~2e-3, fp32 accumulation). A prev_lse far (~88) below a row's scaled logits overflows
    fp32, as it would in the float32 reference. Forward only, like :func:`attention`.

    Args:
        q: (B, H, S_q, D) queries, bfloat16 or float16, on a CUDA device; D is 64 or 128.
        k: (B, H_kv, S_kv, D) keys, q's dtype; H a multiple of H_kv.
        v: (B, H_kv, S_kv, D) values. q, k and v follow :func:`attention`'s rules.
        prev_lse: (B, H, S_q) float32 log-sum-exp of the previous step (e.g. the lse an
            earlier call returned).
        group: query rows per column sum, 128 or 192 (default).
        scale: the logits' factor, a finite number > 0; None (default) is 1 / sqrt(D).

    Returns:
        ``(o, lse, colsum)``: o and lse exactly as ``attention(q, k, v, scale=scale,
        num_splits=1, return_lse=True)``, and colsum (B, H, ceil(S_q / group), S_kv) float32.

    Raises:
        TypeError: as :func:`attention`, or a ``prev_lse`` that is not float32.
        ValueError: as :func:`attention`, a ``prev_lse`` not of shape (B, H, S_q), or a
            ``group`` other than 128 or 192.
        UnsupportedGPUError: a GPU without a kernel path.
    """
    scale = validate_attention(q, k, v, scale)
    validate_colsum(q, prev_lse, group)
    return _ATTENTION_COLSUM(q, k, v, prev_lse, group, scale)


def _attention_colsum(q, k, v, prev_lse, group: int, scale: float, config: dict | None = None):
    """The direct route of ``attention_colsum``, after ``validate_attention`` and
    ``validate_colsum``; ``config``: Hopper kernel overrides (tests, tuning; must include
    colsum=True and the group)."""
    _check_device_args(q=q, k=k, v=v, prev_lse=prev_lse)
    b, h, s_q, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s_q, dtype=torch.float32, device=q.device)
    path, _ = device_target(q.device)
    shape = (b, h, -(-s_q // group), k.shape[2])
    # where a query group spans two CTAs, the kernels add two partial sums onto zeros
    colsum = (torch.zeros if colsum_adds_onto_zeros(path, d, group, config) else torch.empty)(
        shape, dtype=torch.float32, device=q.device)
    key = ("attention_colsum", q.dtype, d, group)
    kernel = kernel_for(q.device, key, lambda path, target: make_build(
        path, q.dtype, d, False, colsum=True, group=group, config=config),
        hopper_key=_config_key(config))
    kernel(*attention_params().call_args(
        mQ=q, mK=k, mV=v, mO=o, mLSE=lse, mPrevLSE=prev_lse.contiguous(), mColsum=colsum,
        mIndices=None, mCounts=None, scale=scale, out_scale=None))
    return o, lse, colsum


@torch.library.custom_op("cute_kernels::attention_colsum", mutates_args=())
def _attention_colsum_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         prev_lse: torch.Tensor, group: int, scale: float
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _attention_colsum(q, k, v, prev_lse, group, scale)


@_attention_colsum_op.register_fake
def _(q, k, v, prev_lse, group, scale):
    b, h, s_q, _ = q.shape
    return (torch.empty_like(q), q.new_empty(b, h, s_q, dtype=torch.float32),
            q.new_empty(b, h, -(-s_q // group), k.shape[2], dtype=torch.float32))


_ATTENTION_COLSUM = KernelOp(_attention_colsum_op, _attention_colsum,
                             grad_inputs=("q", "k", "v"))
