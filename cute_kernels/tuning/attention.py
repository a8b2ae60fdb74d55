"""Attention kernel configurations per problem class, for both paths (perf/RESULTS.md)."""

from __future__ import annotations

from ..kernels.attention.tiles import DECODE_ROWS

#: Query rows (after GQA packing) up to which the Hopper path runs 64-row tiles
#: (``short_query``; perf/RESULTS.md "64-row tiles and cached plans")
SHORT_QUERY_ROWS = 64
#: Keys up to which non-causal D = 128 runs the Hopper kernel's persistent schedule (D = 64
#: and causal D = 128 run it at any length: ``ops.attention.make_plan``) (H100,
#: B x H x S = 512 x 1024: 0.475 against 0.500 ms one CTA per tile; 256 x 2048: 0.938 / 0.950;
#: 128 x 4096: the same; perf/RESULTS.md "Short sequences and D = 64"). Raised from 2,048 with
#: the async store and pingpong (H100, ms persistent / one CTA per tile: B8 H16 S4096 1.801 /
#: 1.855, B4 H16 S8192 3.436 / 3.452, B2 H16 S16384 6.877 / 6.812)
PERSISTENT_MAX_KEYS = 8192
#: Query rows and keys from which D = 64 runs 192 x 128 persistent tiles whose three consumer
#: warpgroups overlap softmax and MMAs and take turns to issue their wgmmas (``tall``)
#: instead of 64 x 128 tiles two CTAs per SM. H200, perf/attention_tuning.py --rounds 20, ms
#: 64 x 128 / 192 x 128 without turns / with turns (cuDNN): B32 H32 S1024 0.675 / 0.732 /
#: 0.671 (0.647), B16 H32 S2048 1.271 / 1.254 / 1.165 (1.245), B8 H32 S4096 2.461 / 2.413 /
#: 2.252 (2.432), B4 H32 S8192 4.867 / 4.704 / 4.390 (4.840); causal S1024 0.424 / 0.534 /
#: 0.474 (0.406), S2048 0.722 / 0.802 / 0.692 (0.702), S4096 1.316 / 1.532 / 1.278 (1.313).
#: H100, the same way, 64 x 128 / 192 x 128 with turns (cuDNN): S2048 1.316 / 1.194 (1.284),
#: S4096 2.487 / 2.263 (2.455), S8192 4.832 / 4.336 (4.820); causal S2048 0.719 / 0.646
#: (0.660), S4096 1.340 / 1.298 (1.339), B2 S16384 4.765 / 4.581 (4.991). Without turns, the
#: first form of this route (non-causal only): H100 B8 H32 S4096 2.400 / 2.386 ms against
#: 2.447 / 2.436 for the 64-row tiles.
TALL_TILE_MIN_SEQ = 2048
#: Whether the tall tiles' consumers take turns (``pingpong``), and causal D = 64 runs them
#: too. Faster at every length measured from 2,048 on both GPUs (perf/RESULTS.md "The tall
#: tiles' consumers taking turns"; H100 B8 H32 S4096 2.263 ms against 2.39-2.40 without);
#: its GPU tests, memcheck and racecheck (causal and not) pass on the H100.
TALL_TURNS = True
#: Whether Hopper split-KV launches of 64-row tiles with 2-8 splits combine the partials in
#: the split kernel, the splits of a tile one thread-block cluster reducing through DSMEM
#: (``AttentionSm90(cluster_splits=n)``, kernels/attention/cluster_combine.py), instead of
#: writing them to a workspace for the combine kernel, where the clusters all fit on the GPU
#: at once (``runtime.arch.cluster_capacity``).
CLUSTER_COMBINE = True
#: Keys up to which ``num_splits=None`` takes 8 splits combined in clusters where the
#: heuristic would take more through the combine kernel: 64 CTAs stream K and V slower than
#: 128, which the combine kernel's ~3.4 us after the split kernel outweighs up to here (H200,
#: CUDA graphs, B1 H32 H_kv8 S_q1, ms, 8 in clusters / 16 through the kernel: S_kv 16k 0.0256
#: / 0.0270, 64k 0.0805 / 0.0715, 128k 0.153 / 0.132; perf/RESULTS.md "Decode attention")
CLUSTER_SPLITS_MAX_KEYS = 16384
#: ... and at any key count where those 8 splits' CTAs already stream as fast as the GPU's
#: memory: ``CLUSTER_CTA_GBPS`` per clustered CTA (H200, B1 S_kv 64k: 268 MB in 80.5 us on 64
#: CTAs) times the CTAs, against ``CLUSTER_HBM_SHARE`` of the peak bandwidth
#: (``runtime.arch.hbm_gbps``). The H100's 3.35 TB/s qualifies (CUDA graphs, B1 S_q 1 S_kv
#: 64k: 0.096 ms in clusters against 0.100 for 16 splits, cuDNN 0.096), the H200's 4.8 does
#: not (0.081 against 0.070).
CLUSTER_CTA_GBPS = 52.0
CLUSTER_HBM_SHARE = 0.85
#: Whether Hopper tiles of at most ``DECODE_SWAP_AB_MAX_ROWS`` query rows (after GQA
#: packing: decoding) run the swap-AB decode kernel (``DecodeSm90``: keys as the MMA's M, the
#: rows as its N, kernels/attention/decode_sm90.py) instead of ``AttentionSm90``'s 64-row
#: tile, whose per-block work on 56-60 padding rows bound the clustered CTAs (H200, CUDA
#: graphs, B1 H32 H_kv8 S_q 1 (4 rows), ms, swap-AB / 64-row tile, best of 8 clustered and 16
#: splits: S_kv 4k 0.0107 / 0.0126, 16k 0.0213 / 0.0255, 64k 0.0641 / 0.0702, 128k 0.1222 /
#: 0.1278; perf/RESULTS.md "Swap-AB decode tiles")
DECODE_SWAP_AB = True
#: ... up to this many rows: at S_q 8 (32 rows) the 64-row tile measured as fast or faster
#: (16k 0.0259 against 0.0275 ms, 64k 0.0702 / 0.0708, 128k 0.1287 / 0.1302)
DECODE_SWAP_AB_MAX_ROWS = 16
#: GB/s one clustered swap-AB CTA streams (H200, B1 S_kv 128k: 537 MB in 122.2 us on 64
#: CTAs, already 0.91 of the HBM's peak: a floor), for ``CLUSTER_HBM_SHARE``'s rule
DECODE_CTA_GBPS = 68.6


def hopper_config(head_dim: int, causal: bool, colsum: bool = False,
                  group: int = 192, split_kv: bool = False, short_query: bool = False,
                  persistent: bool = False, tall: bool = False,
                  cluster_splits: int = 1, decode_rows: int = 0) -> dict:
    """AttentionSm90 keyword arguments per problem class, from perf/attention_tuning.py on an
    H100 (perf/RESULTS.md): D = 128 -> 128 x 128 tiles with softmax/MMA overlap; D = 64 ->
    192 x 128 on three consumer warpgroups (the softmax's exp2 is the bottleneck there; a
    third warpgroup hides it better than the overlap), 128 x 128 when causal (192 x 128 was
    2% faster there but its causal build spills 40 bytes) -- the configurations of launches
    the op does not run persistent (packed, split, short query; ``persistent`` below).
    Column sums ride on the plain kernel's configuration. D = 128: sums by a small WGMMA on P
    stored to smem (``colsum_method="mma"``), inside the 128 x 128 overlapped schedule, an
    8-deep sums ring and two writer warps (3-4% faster at S = 16k and 32k than 4 and one).
    D = 64: sums by
    mma.sync on P transposed in registers (``"mma_sync"``), issued just before O += P V, in the
    192-row tile: 1.11x the plain time against 1.32x for shuffle sums (perf/RESULTS.md).
    Causal D = 128 (one CTA per query tile) walks the tiles ``longest_first``: 2-6% faster
    at S = 1k-16k (B8 H16 S2048: 0.307 against 0.326 ms); at D = 64 it measured 1% slower
    (B16 H32 S2048), so D = 64 keeps the launch order. The split-KV grid keeps its order.
    ``short_query`` (at most 64 query rows per tile: decoding, GQA heads packed): 64-row tiles
    on one consumer warpgroup, whose MMAs no longer share the tensor cores with a second
    warpgroup's padding rows (H100, perf/decode_tiles.py, CUDA graphs, H 32 / H_kv 8: B1 S_q 1
    S_kv 4k split 8 ways 17.2 against 20.3 us, B1 S_kv 64k 99.2 against 100.5 us, B16 S_kv 4k
    92.2 against 94.2 us). ``persistent`` (D = 128: causal, or at most ``PERSISTENT_MAX_KEYS``
    keys): the persistent schedule, its producer loading the next tile's Q and K/V during
    this one, the CTAs walking balanced static lists (``ops.attention.dense_tile_order``);
    causal against the one-CTA-per-tile grid walked longest first (H200, ms vs cuDNN): B8
    H16 S4096 0.985x against 0.934x, B4 H16 S8192 1.039x / 0.993x, B2 H16 S16384 1.072x /
    1.030x; short causal too (H100, after the masks became selects, perf/RESULTS.md "Masks as
    selects"; ms against 128 x 64 tiles with turns / cuDNN): B32 H16 S1024 0.287
    / 0.304 / 0.298, B24 H16 S1536 0.438 / 0.497 / 0.465, B16 H16 S2048 0.498 / 0.590 / 0.546.
    D = 64 (``persistent`` for every unpacked, unsplit shape): 64 x 128 tiles, two CTAs per SM,
    with the overlap, against the 192 x 128 one-CTA-per-tile default (H200, vs cuDNN): B32 H32
    S1024 0.980x / 0.799x, B8 H32 S4096 1.029x / 0.976x, B2 H32 S16384 1.065x / 1.067x;
    causal, against the 128 x 128 launch-order grid: S 4096 0.908x / 0.771x, S 16384 1.031x /
    0.898x; short causal against 64 x 64 tiles two CTAs per SM (H100, after the mask fix): S
    1024 0.414 / 0.451 ms, S 2048 0.723 / 0.804. ``tall`` (persistent D = 64 with at least
    ``TALL_TILE_MIN_SEQ`` query rows and keys; causal only with ``TALL_TURNS``): 192 x 128
    tiles, three consumer warpgroups with the overlap, one CTA per SM, taking turns with
    ``TALL_TURNS`` (H100, B8 H32 S4096: 2.39-2.40 ms without turns, 2.263 with, against 2.44-
    2.49 for the 64-row tiles; ``TALL_TILE_MIN_SEQ``). ``cluster_splits`` (a short-query
    split-KV launch, ``CLUSTER_COMBINE``): its splits combined in a cluster. ``decode_rows``
    (a short-query launch of at most ``DECODE_SWAP_AB_MAX_ROWS`` rows, ``DECODE_SWAP_AB``):
    the swap-AB decode kernel's configuration (``decode_config``)."""
    if cluster_splits > 1 and not (split_kv and short_query):
        raise ValueError(f"cluster_splits {cluster_splits} is the short-query split-KV "
                         f"launch's (64-row decode tiles)")
    if decode_rows:
        if not short_query:
            raise ValueError(f"decode_rows {decode_rows} is the short-query launch's")
        return decode_config(head_dim, decode_rows, cluster_splits)
    if colsum:
        if head_dim == 64:
            return dict(block_m=192, colsum=True, group=group, colsum_method="mma_sync")
        return dict(hopper_config(head_dim, False), colsum=True, group=group, colsum_stages=8,
                    colsum_writers=2)
    if short_query:  # one query tile per head: no tile order to choose
        cfg = dict(overlap=True, block_m=64) if head_dim == 128 else dict(block_m=64)
        return dict(cfg, cluster_splits=cluster_splits) if cluster_splits > 1 else cfg
    if persistent:
        if head_dim == 64 and tall:
            return dict(block_m=192, overlap=True, persistent=True,
                        **({"pingpong": True} if TALL_TURNS else {}))
        if head_dim == 64:
            return dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True)
        # O stored by a producer warp (``async_store``, the kernel's default) and the two
        # consumers taking turns to issue their wgmmas (``pingpong``). The async store alone,
        # H200, ms async / consumers storing: causal B32 H16 S1024 0.394 / 0.417, B16 H16
        # S2048 0.619 / 0.639, B8 H16 S4096 1.060 / 1.079; non-causal B32 H16 S1024 0.488 /
        # 0.476 (2% slower). With pingpong, H100, ms against the async store alone: causal
        # S1024 0.358 / 0.364, S2048 0.606 / 0.613, S4096 1.017 / 1.023, B2 H16 S16384
        # 3.551 / 3.579; non-causal B32 H16 S1024 0.453 against 0.489 with neither
        return dict(overlap=True, persistent=True, pingpong=True)
    if head_dim == 128:
        return dict(overlap=True, longest_first=True) if causal and not split_kv else dict(
            overlap=True)
    return dict() if causal else dict(block_m=192)


def decode_rows(rows: int) -> int:
    """The swap-AB decode tile's rows for ``rows`` query rows: the next of ``DECODE_ROWS``."""
    fitting = [r for r in DECODE_ROWS if r >= rows]
    if not fitting:
        raise ValueError(f"a swap-AB decode tile holds at most {DECODE_ROWS[-1]} query rows, "
                         f"got {rows}")
    return fitting[0]


def decode_config(head_dim: int, rows: int, cluster_splits: int = 1) -> dict:
    """``DecodeSm90`` keyword arguments (with ``decode_rows``) for a tile of ``rows`` query
    rows: 128-key blocks, two K/V stages (H200, B1 S_q 1, ms, two / three stages: S_kv 4k
    0.0107 / 0.0110, 64k 0.0641 / 0.0650, 128k 0.1222 / 0.1240; 64-key blocks, 6 stages:
    0.0117, 0.0696, 0.1283)."""
    cfg = dict(decode_rows=decode_rows(rows), block_n=128, stages=2)
    return dict(cfg, cluster_splits=cluster_splits) if cluster_splits > 1 else cfg


def ampere_config(head_dim: int) -> dict:
    """AttentionSm80 keyword arguments of plain (dense, causal, split-KV) attention. D = 128:
    128 x 64 tiles on 4 warps (32 query rows per warp, FlashAttention-2's choice for
    sm80/sm90), although ptxas spills 160 bytes at 255 registers: every K and V fragment a
    warp reads from smem then feeds two 16-row MMAs instead of one. Against 8 warps of 16
    rows (no spills, 186 registers), forced on an H100 against SDPA-flash: B2 H16 S8192
    0.989x against 0.757x, B8 H16 S2048 0.989x / 0.760x, B2 H16 S16384 causal 1.043x /
    0.741x; 128 x 32 tiles on 4 warps (no spills) 0.95-0.96x. D = 64: the kernel's default
    (4 warps, 128 x 64)."""
    return dict(warps=4) if head_dim == 128 else dict()


#: Listed keys per group up to which the Hopper gather kernel (D = 128, group 128) runs 64 x 64
#: tiles two CTAs to an SM (``short``), as short causal attention does: random lists, ms,
#: 128 x 128 tiles against 64 x 64 (H200, perf/column_sparse_tuning.py): B1 H16 S8192 574 keys
#: 0.127 / 0.107, 246 keys 0.090 / 0.067; S16384 1,147 keys 0.384 / 0.385, 1,475 keys 0.469 /
#: 0.513; S32768 2,294 keys 1.287 / 1.420. 32-key blocks packed at S8192 (576 keys on
#: average): 0.1155 / 0.1081
SHORT_GATHER_MAX_KEYS = 1024


def hopper_gather_config(head_dim: int, group: int, short: bool = False,
                         persistent: bool = False, entry_keys: int = 1) -> dict:
    """AttentionSm90 keyword arguments for column-sparse attention (the gather loader): the
    query tile is the group (its rows share one key list), so group 128 runs two consumer
    warpgroups and group 192 three. Measured on an H100 (perf/column_sparse_tuning.py, B1 H24
    S32768 D128, every column; perf/RESULTS.md): group 192 with 128-key tiles runs at 0.90x
    our dense kernel (0.86x at S 118,784) with the loader's staged row addresses (the
    default; 0.78x without), against 0.72-0.75x with 64-key tiles, although it spills 184
    bytes (ptxas, CUDA 13.0; 160 registers per consumer thread; 64-key tiles spill nothing);
    group 128 with the softmax/MMA overlap 0.78x against 0.70x sequential (before the staged
    addresses). Stages beyond two measured the same (2-5, group 192, 64-key tiles): the
    loader is issue-bound, not latency-bound. D = 64 is not tuned yet. ``short`` (D = 128,
    group 128, lists of at most ``SHORT_GATHER_MAX_KEYS`` keys): 64 x 64 tiles two CTAs per
    SM, whose prologues and epilogues overlap each other's MMAs; ``persistent`` (short lists,
    more tiles than CTAs): those CTAs stay resident and walk their tiles (the device's
    ``ops.tile_order.snake_walks`` for single keys; for a reused block-sparse mask's packed
    lists, walks dealt on the host: ``ops.column_sparse.packed_walks``), each fetching its
    next tile's Q and K/V while it finishes the last. ``entry_keys`` (lists of blocks of that
    many keys, block-sparse attention's packed small blocks): with ``GATHER_TMA_BLOCKS``, one
    TMA box per listed block (``gather_tma``) where the blocks are whole swizzle atoms that
    tile the key tile."""
    if group not in (128, 192):
        raise ValueError(f"the Hopper gather kernel takes group 128 or 192 (one consumer "
                         f"warpgroup per 64 rows of a group), got {group}")
    overlap = head_dim == 128 and group == 128
    turns = (SHORT_PACKED_TURNS and GATHER_TMA_BLOCKS and gather_tma_blocks(entry_keys, 64))
    if short and overlap and turns:  # packed blocks by TMA, short lists
        cfg = dict(block_m=128, block_n=64, stages=3, gather=True, group=group, overlap=True,
                   pingpong=True, **({"persistent": True} if persistent else {}))
    elif short and overlap:  # at most SHORT_GATHER_MAX_KEYS keys per group
        cfg = dict(block_m=64, block_n=64, gather=True, group=group, overlap=True,
                   ctas_per_sm=2, **({"persistent": True} if persistent else {}))
    else:
        cfg = dict(block_m=group, block_n=128, gather=True, group=group, overlap=overlap)
    if GATHER_TMA_BLOCKS and gather_tma_blocks(entry_keys, cfg["block_n"]):
        cfg["gather_tma"] = True
    return cfg


#: Whether short lists of packed key blocks (TMA boxes, ``GATHER_TMA_BLOCKS``) run 128 x 64
#: tiles, three stages, one CTA per SM whose two consumers take turns (``pingpong``) instead
#: of the 64 x 64 tiles two CTAs per SM: H100, perf/block_sparse_loaders.py, B1 H16 S8192,
#: 32-key blocks 93% absent, host-dealt walks: 0.089 against 0.093 ms (0.612 / 0.582 of the
#: ideal); two stages 0.093
SHORT_PACKED_TURNS = True

#: Whether lists of key blocks (``entry_keys`` a multiple of 8) load each block by one TMA box
#: (``kernels/attention/kv_block_loader.py``) instead of the producer warpgroup's row gather.
#: H200, perf/block_sparse_loaders.py, B1 H16 S8192, 93% of the blocks absent, 64 x 64 tiles,
#: ms row gather / TMA: 32-key blocks 0.109 / 0.103, 64-key 0.108 / 0.101, 16-key 0.116 /
#: 0.115; S 32768 (128 x 128 tiles), 32-key 1.271 / 1.252
GATHER_TMA_BLOCKS = True


def gather_tma_blocks(entry_keys: int, block_n: int) -> bool:
    """Whether blocks of ``entry_keys`` keys can fill ``block_n``-key tiles by TMA: whole
    8-row swizzle atoms that divide the tile."""
    return entry_keys > 1 and entry_keys % 8 == 0 and block_n % entry_keys == 0

#: Whether short gathered lists of single keys (``SHORT_GATHER_MAX_KEYS``, the writing kernel)
#: with more tiles than CTAs run persistent CTAs (``hopper_gather_config(persistent=True)``)
#: instead of the ordered grid: H200, perf/column_sparse_tuning.py --group 128, B1 H16 S8192,
#: random lists, ms ordered grid / persistent: 574 keys 0.114 / 0.107, 246 keys 0.073 / 0.061.
#: Block-sparse's packed block entries run persistent only on walks dealt on the host for a
#: reused mask (``column_sparse.packed_walks``): the device's snake deal lost to the ordered
#: grid there (32-key blocks at S 8k, H200, perf/block_sparse_loaders.py: 0.112 against 0.108
#: ms; host-dealt walks 0.097-0.100)
SHORT_GATHER_PERSISTENT = True
