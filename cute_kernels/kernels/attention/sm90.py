"""Hopper-path flash attention forward: TMA, WGMMA, warp specialization, online softmax.

Tensors as in sm80.py: q (B, H, S_q, D), k/v (B, H_kv, S_kv, D), o like q, lse (B, H, S_q)
fp32; unit-stride head dim. Causal masks bottom-right aligned.

The kernel reads as its roles: ``kernel`` sets up what every role shares and dispatches;
``load`` is the producer (the mixin ``ProducerLoads``, producer.py), ``mma`` (with
``_mainloop_sequential`` or ``_mainloop_overlapped``, the mixin ``ConsumerMainloops`` in
mainloop.py) and ``epilogue`` the consumers. Three seams: which key blocks a query tile
visits (``self.key_blocks``, block_info.py), how K and V reach shared memory
(``self.kv_loader``, kv_loader.py), and the column sums (``self.sums``, column_sums.py).
The persistent schedule's walk is the mixin ``PersistentSchedule`` (persistent.py); the warp
roles and the state they hand each other are in roles.py. Decoding's few query rows also
run on ``DecodeSm90`` (decode_sm90.py), the same producer with the MMA's operands swapped.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from ..common.constants import LOG2E, SM90_SMEM_BYTES
from ..common.grid_order import ordered_tile
from .block_info import (
    BlockListKeyBlocks,
    PackedBlockLists,
    SplitKeyBlocks,
    gather_key_tile,
    key_block_policy,
    key_block_tile,
    split_launch,
    split_of_batch,
)
from .cluster_combine import ClusterCombine
from .column_sums import ColumnSumsSm90, NoColumnSums
from .kv_block_loader import TmaBlockKVLoader
from .kv_loader import GatherKVLoader, TmaKVLoader, _sdhb
from .mainloop import ConsumerMainloops
from .online_softmax import (
    acc_as_a_operand,
    acc_mn_view,
    softmax_finish,
    store_lse,
)
from .persistent import PersistentSchedule, o_ready
from .producer import ProducerLoads
from .roles import (
    PRODUCER_WARPGROUP,
    STORE_WARP,
    TMA_WARP,
    ConsumerTile,
    NamedBarrier,
    TileCoord,
)
from .tiles import HOPPER_DEFAULT_TILE, LONGEST_FIRST_CHUNK_TILES, colsum_spans_ctas

#: consumer warpgroups -> (producer, consumer) registers per thread (setmaxnreg)
REGISTERS = {1: None, 2: (40, 232), 3: (32, 160)}  # None: no reallocation
#: (producer, consumer) registers of a 64-row tile at two CTAs per SM: 128 each at launch
#: (256 threads x 2 CTAs x 128 = the SM's 64 Ki), (40 + 208) x 128 after the exchange
TWO_CTA_REGISTERS = (40, 208)
#: shared memory one CTA may take at two CTAs per SM (228 KiB less 1 KiB reserved per CTA)
TWO_CTA_SMEM = 113 * 1024
class AttentionSm90(PersistentSchedule, ConsumerMainloops, ProducerLoads):
    """Warp-specialized flash attention, one CTA per (query block, head, batch), or one per SM
    walking the tiles (``persistent``).

    Warp roles (``kernel`` dispatches each to its method): warpgroup 0 is the producer
    (``setmaxnreg`` down); its warp 0 runs ``load``: TMA of Q once, then K and V of every key
    block the key-block iterator (block_info.py) yields, through the K/V loader (kv_loader.py).
    Warps 1.. of it are the column-sum writers (``ColumnSumsSm90.write``); warp 1 is the
    persistent schedule's O store warp (``async_store``). The consumer
    warpgroups (``setmaxnreg`` up) run ``mma`` and own 64 query rows each: S = Q K^T by WGMMA
    from smem, online softmax in registers (exp2, scale folded), P kept in registers as the A
    operand of O += P V (WGMMA, V an MN-major smem operand), then ``epilogue``.
    Tiles: ``block_m`` = 64 x consumers (64: one consumer warpgroup and no register
    reallocation, for decoding's few query rows; 128: registers 40 / 232; 192: 32 / 160) by
    ``block_n`` keys. Schedules per consumer: sequential (S, softmax, P V) or ``overlap`` (S(n)
    and P(n + 1) V(n + 1) in flight together), either with ``pingpong``: the consumers issue
    their wgmmas in turn (Q K^T; with the overlap each (Q K^T, P V) pair), through
    ``NamedBarrier.PINGPONG`` + consumer, so one's softmax runs beside the other's MMAs.
    Causal with the overlap, a consumer whose rows cannot see the tile's first visited (last)
    key block starts at the next visit (``skip_hidden``; 128 x 64 tiles: the lower one).
    Column-sum variant (``colsum``, any tile and schedule above; the collaborator
    ``ColumnSumsSm90`` in column_sums.py, called at named points of each schedule): per key
    tile, the column
    sums sum_r P[r, c] f[r] of each consumer's rows, f = exp2(m * scale_log2 - prev_lse *
    log2 e), by one of three ``colsum_method``s:
    ``"mma"`` (D = 128 default): P (bf16, stmatrix) and f to smem, one small WGMMA (m64n8k16,
    keys as M, P read transposed, rows as K) that retires with O += P V; one ring slot per
    consumer. ``"mma_sync"`` (D = 64 default): P transposed in registers (movmatrix), one
    mma.sync m16n8k16 per 16 keys and warp, issued before O += P V and read after it (behind
    a wgmma they stall on the busy tensor pipe); one slot per warp. ``"shuffle"``: fp32 P f
    summed on the ALUs and reduce-scattered by shuffles (exact fp32; the tile must be the
    group). The sums reach warp 1 of the producer warpgroup through a ``colsum_stages``-deep
    smem ring (``PipelineAsync``); it adds the slots of one query group and writes each
    (group, key) once: a plain store when the group is the CTA's tile, else an fp32
    ``red.add`` onto zeros, at most two terms per element (a 64-row-aligned group of 128 or
    192 rows spans at most two CTAs), hence deterministic.
    Pipeline: Q in a one-stage barrier (two stages when persistent); K and V each in a
    ``stages``-deep ``PipelineTmaAsync`` ring (a loader may fill a stage any way that
    completes its full barrier); the dense and causal iterators visit key blocks last to
    first so the masked ones come first.
    Shared memory (D = 128, 128 x 128, 2 stages): Q 32 KiB + K 64 KiB + V 64 KiB; column sums
    add the ring, colsum_stages x slots x block_n x 4 B, and for wgmma sums per consumer P
    64 x block_n x 2 B + factors 8 x 64 x 2 B (204 KiB in all at the D = 128 default).
    Epilogue: O normalised, converted, written to Q's smem and stored by TMA (which clips
    rows past S_q); lse written by the first thread of each quad. With ``accumulate`` the
    store is a TMA reduce-add (``cp.reduce.async.bulk.tensor.add``) of ``out_scale * O``
    into the output: every output tile belongs to exactly one CTA, which adds it once.
    Gather variant (``gather``, column-sparse attention; GPU tests and sanitizers pass on an
    H100, perf/RESULTS.md): the tile is one query group, its key blocks are chunks of the
    group's packed key list
    (``mIndices``/``mCounts``, the last chunk masked past the count), and the whole producer
    warpgroup runs ``load_gathered``: Q by TMA, K and V rows by 16-byte cp.async into the
    same swizzled stages (``GatherKVLoader``; ``gather_addresses``, the default: the rows'
    64-bit K and V addresses staged once per row); the consumers are unchanged. Adds a
    ``block_n x stages`` ring to shared memory (16 bytes per entry with staged addresses,
    an int32 index without). Block entries (``gather_entry_keys`` > 1, block-sparse
    attention's packed small blocks; ``gather_tma``: one TMA box per block) may carry an
    element ``mask`` for the partial blocks listed first (``PackedBlockLists``: the softmax
    maps a masked column's list position to its key; ``mFullCounts`` holds each group's
    full positions, ``mDocIds`` the document ids).
    Block-sparse variant (``block_sparse``, FlexAttention block lists; GPU tests pass on an
    H100): 128 x 128 tiles, the ``BlockListKeyBlocks`` policy visits a query tile's partial key
    blocks (``mIndices``/``mCounts``) then its full ones (``mFullIndices``/``mFullCounts``),
    one list entry read per visit; partial blocks get the element ``mask`` (``mask_mod.py``) in
    the softmax; loads, roles and pipelines are the dense kernel's.
    Persistent schedule (``persistent``; the op's default for causal D = 128 and non-causal
    D = 128 with at most 8,192 keys, and for short gathered lists, tuning/attention.py):
    ``num_ctas`` CTAs (one or two per SM) walk static tile lists ``mTileOrder`` in CSR form
    (entries c and c + 1 bound CTA c's list: the host's ``balanced_walks``, causal tiles dealt
    longest first to the CTA that frees up first, or the device's ``snake_walks`` of a gather
    order); every role carries its pipeline states from tile to tile, so the producer loads
    the next tile's Q (two Q stages) and first K/V blocks while the consumers finish this
    one, hiding the per-tile launch, Q load and pipeline fill. O leaves through Q's stage:
    with ``async_store`` (the default where a producer warp is free: not the row gather) the
    consumers write it, arrive on ``O_READY`` + stage and go on to their next tile, while
    producer warp ``ASYNC_STORE_WARP`` stores it by TMA and frees the stage once the store
    has read it (128 x 128 causal tiles 2-6% faster on an H200, perf/RESULTS.md); else the
    consumers' store warp stores and they all wait for that read. On an H200: causal S 4k-16k
    4-6% faster than the longest-first grid, short causal at two CTAs per SM 3-8%, 246-574-key
    gathered lists 6-20%. The gather variant's whole producer warpgroup walks (warp 0 also
    issues Q).

    Two CTAs per SM (``ctas_per_sm=2``, 64-row tiles only; the op's choice for D = 64 and for
    gathered lists of at most 1,024 keys, tuning/attention.py):
    ptxas builds for 128 registers a thread at launch (``.minnctapersm 2``), the producer
    hands its share to the consumer (40 / 208), and shared memory stays under 113 KiB (64 x 64
    key tiles, two stages: 83 KiB at D = 128), so one CTA's Q load, pipeline fill and epilogue
    run beside the other's MMAs. A gather tile of 64 rows reads its group's list (the group a
    multiple of 64). On an H200: 13-23% faster at causal S = 1k, 16-25% on 250-570-key lists.

    Device tile order (``tile_order``, column-sparse): CTA r of the one-CTA-per-tile grid runs
    tile ``mTileOrder[r]`` (``ordered_tile``), the op's order (ops/tile_order.py: longest
    lists first within chunks of heads).

    Tile order (``longest_first``, causal D = 128 where the op runs no persistent schedule:
    packed or split): the one-CTA-per-tile grid is walked in chunks of about a wave of tiles
    (``longest_first_coords``), each chunk's heads' last query tiles (the most key blocks)
    first, so the short diagonal tiles fill the chunk's tail while the K/V it reads stays in L2.
    Split-KV variant (``split_kv``, decoding; GPU tests pass on an H100): the grid's z is
    split x B + batch; ``SplitKeyBlocks`` gives each CTA one range of the tile's key blocks,
    and O and lse (n_splits x B batch entries) hold the partials the op combines.
    ``cluster_splits`` n (2-8, with ``split_kv``; GPU tests, memcheck and racecheck pass on an
    H100 and an H200): z is batch x n + split and the n splits of a tile are one (1, 1, n)
    cluster that combines them itself (``ClusterCombine``, cluster_combine.py): after its key
    loop each consumer stages its fp32 O and lse in the K ring (once every consumer has
    passed a named barrier), every role of every CTA meets at a cluster barrier, the
    consumers of CTA r merge rows r, r + n, ... from the peers' shared memory into O and lse
    (B batch entries), and a second cluster barrier keeps the staging alive until all have
    read it. Shared memory as the plain kernel's (the staging, block_m x (D + 8) x 4 + block_m
    x 4 B, must fit the K ring: 34.8 of 64 KiB for the 64-row decode tile).
    """

    def __init__(self, head_dim: int, causal: bool, stages: int = 2, colsum: bool = False,
                 overlap: bool = False, block_m: int | None = None,
                 block_n: int | None = None, group: int = 192, pingpong: bool = False,
                 colsum_method: str = "mma", colsum_rounds: int = 3, colsum_writers: int = 1,
                 colsum_stages: int = 4, gather: bool = False, accumulate: bool = False,
                 gather_prefetch: bool = True, gather_hoist: bool = True,
                 gather_addresses: bool = True,
                 gather_entry_keys: int = 1, gather_tma: bool = False,
                 block_sparse: bool = False, mask=None, split_kv: bool = False,
                 persistent: bool = False, longest_first: bool = False,
                 tile_order: bool = False, ctas_per_sm: int = 1,
                 async_store: bool | None = None, skip_hidden: bool = True,
                 cluster_splits: int = 1):
        self.head_dim, self.causal, self.stages, self.colsum = head_dim, causal, stages, colsum
        # overlap: the softmax of S(n) runs while O += P(n + 1) V(n + 1) is on the tensor cores
        # (intra-warpgroup pipelining)
        self.overlap = overlap
        self.persistent = persistent  # (checked below; smem_bytes reads q_stages)
        self.q_stages = 2 if persistent else 1
        self.gather, self.gather_prefetch = gather, gather_prefetch  # (smem_bytes reads it)
        # each step checks its arguments against those set before it, in this order
        self._init_tile(block_m, block_n, colsum, pingpong, block_sparse, persistent, gather,
                        ctas_per_sm)
        self._init_column_sums(causal, colsum, colsum_method, group, colsum_rounds,
                               colsum_writers, colsum_stages)
        self._init_warps(ctas_per_sm)
        self._init_variant(causal, colsum, pingpong, overlap, gather, group, accumulate,
                           block_sparse, mask, split_kv, gather_entry_keys)
        self._init_cluster_combine(cluster_splits, persistent)
        self._init_schedule(causal, colsum, gather, gather_entry_keys, persistent, pingpong,
                            longest_first, tile_order)
        self._init_memory(head_dim, stages, gather, gather_hoist, gather_addresses,
                          gather_entry_keys, gather_tma, ctas_per_sm)
        self._init_store(persistent, async_store)
        # skip_hidden (causal, several consumers, the overlapped loop): a consumer whose rows
        # the causal mask hides the whole first visited block from issues no wgmma for it
        # (mainloop.py ``_skip_hidden_first_block``)
        self.skip_hidden = skip_hidden
        self.sums = NoColumnSums()
        if colsum:
            self.sums = ColumnSumsSm90(
                method=colsum_method, block_m=self.block_m, block_n=self.block_n,
                consumer_wgs=self.consumer_wgs, group=group, partials=self.colsum_partials,
                rounds=colsum_rounds, writers=colsum_writers, stages=colsum_stages,
                atomic=self.colsum_atomic, operands_barrier=NamedBarrier.COLSUM_OPERANDS,
                key_blocks=self.key_blocks)

    def _init_tile(self, block_m, block_n, colsum, pingpong, block_sparse, persistent, gather,
                   ctas_per_sm):
        """``block_m`` x ``block_n``: 64 x consumers rows, 16-multiples of 32-256 keys."""
        self.block_m = block_m or HOPPER_DEFAULT_TILE[0]
        self.block_n = block_n or HOPPER_DEFAULT_TILE[1]
        if self.block_m // 64 not in REGISTERS or self.block_m % 64:
            raise ValueError(f"block_m must be 64, 128 or 192, got {self.block_m}")
        # 64 rows (one consumer warpgroup): decoding's few packed query rows, where a second
        # warpgroup's MMAs would run on padding and halve the tensor cores' share for the rest
        if self.block_m == 64 and (colsum or pingpong or block_sparse
                                   or (gather and ctas_per_sm != 2)):
            raise ValueError("block_m 64 applies to plain (dense, causal, split-KV, "
                             "persistent) attention and, at two CTAs per SM, to the gather "
                             "variant")
        if self.block_n % 16 or not 32 <= self.block_n <= 256:
            raise ValueError(f"block_n must be a multiple of 16 in [32, 256], got "
                             f"{self.block_n}")

    def _init_column_sums(self, causal, colsum, colsum_method, group, colsum_rounds,
                          colsum_writers, colsum_stages):
        """The column-sum collaborator's configuration (checked even when ``colsum`` is off:
        the group and ring settings are the kernel's fields either way)."""
        if colsum:
            if causal:
                raise ValueError("the column-sum variant is non-causal")
            if colsum_method not in ("mma", "mma_sync", "shuffle"):
                raise ValueError(f"colsum_method must be 'mma', 'mma_sync' or 'shuffle', got "
                                 f"{colsum_method!r}")
            # keys are the column-sum MMA's M (64 per wgmma atom, per chain of four mma.sync);
            # the reduce-scatter needs block_n / 4 columns per thread divisible by 8
            key_multiple = 32 if colsum_method == "shuffle" else 64
            if self.block_n % key_multiple:
                raise ValueError(f"the column-sum variant ({colsum_method}) needs block_n a "
                                 f"multiple of {key_multiple}, got {self.block_n}")
            # 64-row consumers each lie in one group, and a group spans at most two CTAs
            if group not in (128, 192):
                raise ValueError(f"group must be 128 or 192, got {group}")
            # shuffle sums: the writers add whole CTAs, so the query tile is the group
            if colsum_method == "shuffle" and group != self.block_m:
                raise ValueError(f"colsum_method='shuffle' needs block_m == group, got "
                                 f"{self.block_m} and {group}")
        # shuffle rounds per consumer warp (3: one partial per warp and column; fewer leave
        # 2^(3 - rounds) partials per warp for the writer warps to add)
        if colsum_rounds not in (1, 2, 3) or colsum_writers not in (1, 2, 3):
            raise ValueError("colsum_rounds and colsum_writers must be 1, 2 or 3")
        # depth of the consumers -> writer ring of column sums
        if colsum_stages < 2:
            raise ValueError(f"colsum_stages must be >= 2, got {colsum_stages}")
        self.group, self.colsum_method, self.colsum_stages = group, colsum_method, colsum_stages
        self.colsum_rounds, self.colsum_writers = colsum_rounds, colsum_writers
        self.consumer_wgs = self.block_m // 64
        # ring slots per key tile: one per consumer (wgmma sums), per warp (mma.sync sums), or
        # per warp and lane spread (shuffle sums)
        self.colsum_partials = {"mma": self.consumer_wgs, "mma_sync": self.consumer_wgs * 4}.get(
            colsum_method, self.consumer_wgs * 4 << (3 - colsum_rounds))

    def _init_warps(self, ctas_per_sm):
        """Threads, CTAs per SM and the (producer, consumer) registers after setmaxnreg."""
        # one consumer warpgroup (256 threads) already gets up to 255 registers each, so it
        # reallocates nothing
        self.registers = REGISTERS[self.consumer_wgs]
        self.threads = 128 * (1 + self.consumer_wgs)
        # ctas_per_sm 2 (64-row tiles only): two CTAs share an SM, so one's prologue (Q load,
        # pipeline fill) and epilogue run beside the other's MMAs; ptxas then caps the launch
        # at 128 registers a thread and the producer hands its share to the consumer
        if ctas_per_sm not in (1, 2) or (ctas_per_sm == 2 and self.block_m != 64):
            raise ValueError(f"ctas_per_sm must be 1, or 2 with block_m 64, got {ctas_per_sm}")
        self.ctas_per_sm = ctas_per_sm
        if ctas_per_sm == 2:
            self.registers = TWO_CTA_REGISTERS

    def _init_variant(self, causal, colsum, pingpong, overlap, gather, group, accumulate,
                      block_sparse, mask, split_kv, gather_entry_keys):
        """Which kernel this is (pingpong, gather, accumulate, block-sparse, split-KV) and so
        which key blocks its tiles visit (``self.key_blocks``)."""
        # pingpong: consumer warpgroups take turns issuing their wgmmas (Q K^T; with the
        # overlap, Q K^T and P V together), so one's softmax runs beside the other's MMAs
        if pingpong and overlap and colsum:
            raise ValueError("pingpong with the overlap does not combine with column sums")
        self.pingpong = pingpong
        # gather (column-sparse attention): each query group attends to its own list of key
        # rows, packed into dense tiles by the gather loader; a tile lies in one group
        if gather:
            if causal or colsum:
                raise ValueError("the gather (column-sparse) variant is neither causal nor a "
                                 "column-sum kernel")
            if group % self.block_m:
                raise ValueError(f"the gather variant needs block_m to divide group (the rows "
                                 f"of a tile share one key list), got {self.block_m} and "
                                 f"{group}")
        # accumulate: out += out_scale * O by a TMA reduce-add store (the cross-step delta);
        # each output tile belongs to one CTA, which adds it once, so no two adds race
        if accumulate and colsum:
            raise ValueError("accumulate does not combine with the column-sum variant")
        self.accumulate = accumulate
        # block_sparse: the key blocks of FlexAttention-style block lists (partial ones under
        # the element ``mask``, a cute_kernels.masks.Mask), one 128 x 128 block per tile
        self.block_sparse = block_sparse
        if block_sparse:
            if causal or colsum or gather or accumulate:
                raise ValueError("the block-sparse variant is not causal (use the causal "
                                 "mask), a column-sum, gather or accumulating kernel")
            if (self.block_m, self.block_n) != (128, 128):
                raise ValueError(f"the block-sparse variant takes 128 x 128 tiles (the block "
                                 f"size), got {self.block_m} x {self.block_n}")
            self.key_blocks = BlockListKeyBlocks((self.block_m, self.block_n), mask)
        elif mask is not None and gather and gather_entry_keys > 1 and not accumulate:
            # block-sparse attention's small blocks, packed: the mask inside the partial ones
            self.key_blocks = PackedBlockLists((self.block_m, self.block_n), group,
                                               gather_entry_keys, mask)
        elif mask is not None:
            raise ValueError("an element mask applies to the block-sparse variant and to the "
                             "writing gather variant's block entries (gather_entry_keys > 1)")
        else:
            self.key_blocks = key_block_policy((self.block_m, self.block_n), causal)
        # split_kv (flash-decoding): the key blocks of a query tile split over several CTAs,
        # each writing a partial (O, lse) the op combines; the grid's z is split * B + batch
        self.split_kv = split_kv
        if split_kv:
            if colsum or gather or block_sparse or accumulate:
                raise ValueError("split_kv applies to plain (dense or causal) attention")
            self.key_blocks = SplitKeyBlocks(self.key_blocks)

    def _init_cluster_combine(self, cluster_splits, persistent):
        """``cluster_splits`` n > 1 (with ``split_kv``): the n key ranges of a tile are one
        cluster's CTAs, which combine their partials through DSMEM into O and lse
        (cluster_combine.py) instead of writing them for the op's combine kernel."""
        self.cluster_combine = None
        if cluster_splits == 1:
            return
        if not self.split_kv or persistent:
            raise ValueError(f"cluster_splits {cluster_splits} applies to the split_kv kernel "
                             f"(one CTA per tile and range)")
        # the merge runs after the roles rejoin, where ptxas budgets registers for both roles:
        # with setmaxnreg (several consumer warpgroups, two CTAs per SM) it would spill there
        # (180 bytes at 64 x 64 two per SM, perf/RESULTS.md "Decode attention")
        if self.registers is not None:
            raise ValueError("cluster_splits applies to kernels that reallocate no registers "
                             "(one consumer warpgroup, one CTA per SM: block_m 64)")
        self.cluster_combine = ClusterCombine(cluster_splits, self.block_m, self.head_dim,
                                              128 * self.consumer_wgs)
        # the partials are staged in the K ring, free once the key loop is done
        k_ring = 2 * self.stages * self.block_n * self.head_dim
        if self.cluster_combine.smem_bytes() > k_ring:
            raise ValueError(f"cluster_splits: the staged {self.block_m} x {self.head_dim} "
                             f"fp32 partial needs {self.cluster_combine.smem_bytes()} bytes, "
                             f"more than the K ring's {k_ring}")

    def _init_schedule(self, causal, colsum, gather, gather_entry_keys, persistent, pingpong,
                       longest_first, tile_order):
        """The order the tiles run in: persistent, longest first or a device tile order."""
        # persistent: one or two CTAs per SM each walk their own static tile list (the
        # walks, persistent.py), so a tile's Q load, K/V prologue and epilogue overlap its
        # neighbours' mainloops; Q gets two stages (the next tile's Q lands while this one's
        # O leaves through the other). Dense, causal, block-list and writing gather kernels.
        if persistent and (colsum or self.split_kv or self.accumulate or tile_order):
            raise ValueError("persistent applies to the dense, causal, block-sparse and "
                             "(writing, unordered) gather kernels")
        if gather_entry_keys != 1 and not gather:
            raise ValueError("gather_entry_keys applies to the gather variant (gather=True)")
        # longest_first (causal): the one-CTA-per-tile grid is walked in chunks of about a
        # wave of tiles (LONGEST_FIRST_CHUNK_TILES), a chunk's heads' longest query tiles
        # first, so the short diagonal tiles fill each chunk's tail and the K/V a chunk reads
        # (a few heads') stays in L2
        if longest_first and (not causal or persistent or self.split_kv or colsum or gather
                              or self.block_sparse):
            raise ValueError("longest_first applies to the causal one-CTA-per-tile kernel")
        self.longest_first = longest_first
        # tile_order (gather): the grid's CTAs run the tiles in the order ``mTileOrder`` gives
        # (the op's: longest key lists first within chunks of heads), so uneven lists still
        # fill each wave. Not for block lists: there the order's load in front of each CTA's
        # first Q load cost more than the balance gained (ops/block_sparse.py make_build)
        if tile_order and not gather:
            raise ValueError("tile_order applies to the gather (column-sparse) variant")
        self.tile_order = tile_order

    def _init_memory(self, head_dim, stages, gather, gather_hoist, gather_addresses,
                     gather_entry_keys, gather_tma, ctas_per_sm):
        """The K/V loader (TMA; the gather's cp.async; or, ``gather_tma``, one TMA per listed
        block of ``gather_entry_keys`` keys) and the shared-memory budget: an sm_90 CTA's, or
        half an SM's at two CTAs per SM."""
        if gather_tma and (not gather or gather_entry_keys == 1):
            raise ValueError("gather_tma applies to the gather variant with block entries "
                             "(gather_entry_keys > 1)")
        if gather_tma:
            self.kv_loader = TmaBlockKVLoader(self.block_n, head_dim, gather_entry_keys)
        elif gather:
            self.kv_loader = GatherKVLoader(self.block_n, head_dim, NamedBarrier.GATHER_INDICES,
                                            hoist_swizzle=gather_hoist,
                                            stage_addresses=gather_addresses,
                                            entry_keys=gather_entry_keys)
        else:
            self.kv_loader = TmaKVLoader(self.block_n, head_dim)
        if self.smem_bytes() > SM90_SMEM_BYTES:  # (reads the loader's ring)
            raise ValueError(f"block {self.block_m} x {self.block_n} at head dim {head_dim} "
                             f"needs {self.smem_bytes()} bytes of shared memory, more than the "
                             f"{SM90_SMEM_BYTES} an sm_90 CTA may have")
        if ctas_per_sm == 2 and self.smem_bytes() > TWO_CTA_SMEM:
            raise ValueError(f"ctas_per_sm 2: block {self.block_m} x {self.block_n} with "
                             f"{stages} stages needs {self.smem_bytes()} bytes of shared memory, "
                             f"more than the {TWO_CTA_SMEM} of half an SM (fewer stages or a "
                             f"narrower block_n)")

    def _init_store(self, persistent, async_store):
        """Who stores O: the consumers (``STORE_WARP``), or with ``async_store`` (the
        persistent schedule's default) the producer warp ``ASYNC_STORE_WARP``, which frees
        Q's stage once its TMA store has read O, so the consumers start their next tile
        without waiting for that read. The row gather keeps every producer warp busy, so its
        consumers store."""
        row_gather = self.gather and self.kv_loader.producer_threads > 1
        if async_store is None:
            async_store = persistent and not row_gather
        if async_store and (not persistent or row_gather):
            raise ValueError("async_store applies to the persistent schedule (without the "
                             "row gather, whose producer warps all load)")
        self.async_store = async_store

    def smem_bytes(self) -> int:
        """Shared memory of the SharedStorage built in ``__call__`` (alignment included)."""
        BM, BN, D, wgs = self.block_m, self.block_n, self.head_dim, self.consumer_wgs
        tiles = 2 * (self.q_stages * BM * D + 2 * self.stages * BN * D)  # Q, K, V (16-bit)
        # P and f are 1024-aligned members: at least one 1 KiB slot each, even when unused
        p_and_f = 2 * 1024
        if self.colsum and self.colsum_method == "mma":
            p_and_f = 2 * BM * BN + 1024 * wgs + 1024  # P, f (1 KiB per consumer), padding
        sums = BN * self.colsum_partials * self.colsum_stages * 4 if self.colsum else 4
        # the gather's ring (the loader sizes it; a 16-byte aligned member)
        indices = 4 * self.kv_loader.ring_words(self.stages) + 16 if self.gather else 4
        return 1024 + tiles + p_and_f + sums + indices  # barriers (and their alignment) first

    @property
    def colsum_atomic(self) -> bool:
        """Whether a query group can span two CTAs (then the sums are added onto zeros)."""
        return self.colsum and colsum_spans_ctas(self.group, self.block_m)


    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor, mPrevLSE, mColsum, mIndices, mCounts, scale: Float32,
                 out_scale, stream, mFullIndices=None, mFullCounts=None, mDocIds=None,
                 mTileOrder=None, num_ctas=None):
        """Tensors as AttentionSm80.__call__ (column sums: ``mPrevLSE``, ``mColsum``;
        column-sparse key rows: ``mIndices``, ``mCounts``; ``out_scale`` (Float32) with
        ``accumulate``: O is added, times it, into ``mO``; each None when unused). Block
        lists (``block_sparse``): the partial blocks in ``mIndices`` (B, H, M, N) /
        ``mCounts`` (B, H, M), the full ones in ``mFullIndices`` / ``mFullCounts``; the
        document mask's ids (B, S) in ``mDocIds``. ``persistent``: ``mTileOrder`` (int32) is
        the ``num_ctas`` CTAs' walks: entries c and c + 1 bound CTA c's list of query tiles
        ``(b * H + h) * M + m`` (``tile_scheduler.balanced_walks``)."""
        dtype = mQ.element_type
        BM, BN, D = self.block_m, self.block_n, self.head_dim
        qk_mma = sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.K, OperandMajorMode.K, Float32,
            (self.consumer_wgs, 1, 1), tiler_mn=(64, BN))
        pv_mma = sm90_utils.make_trivial_tiled_mma(
            dtype, dtype, OperandMajorMode.K, OperandMajorMode.MN, Float32,
            (self.consumer_wgs, 1, 1), tiler_mn=(64, D), a_source=warpgroup.OperandSource.RMEM)
        sQ_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, D), dtype,
                                                  self.q_stages)
        sK_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, D), dtype,
                                                  self.stages)
        sV_layout = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BM, D, BN), dtype,
                                                  self.stages)
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, tQ = cpasync.make_tiled_tma_atom(g2s, _sdhb(mQ),
                                                cute.slice_(sQ_layout, (None, None, 0)), (BM, D))
        tma_k, tK, tma_v, tV = self.kv_loader.make_atoms(mK, mV, sK_layout, sV_layout)
        store_op = (cpasync.CopyReduceBulkTensorTileS2GOp() if self.accumulate
                    else cpasync.CopyBulkTensorTileS2GOp())
        tma_o, tO = cpasync.make_tiled_tma_atom(store_op, _sdhb(mO),
                                                cute.slice_(sQ_layout, (None, None, 0)), (BM, D))
        # column sums: out(keys, 8) = P^T(keys, rows) f(rows, 8), one warpgroup's 64 rows; P is
        # the MN-major A operand (keys contiguous), f the K-major B operand (one per consumer)
        col_mma = sm90_utils.make_trivial_tiled_mma(
            BFloat16, BFloat16, OperandMajorMode.MN, OperandMajorMode.K, Float32, (1, 1, 1),
            tiler_mn=(64, 8))
        sP_layout = sm90_utils.make_smem_layout_a(LayoutEnum.COL_MAJOR, (BN, 8, 64), BFloat16,
                                                  self.consumer_wgs)
        sF_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BN, 8, 64), BFloat16,
                                                  self.consumer_wgs)
        mma_sums = self.colsum and self.colsum_method == "mma"
        combine = self.cluster_combine
        col_size = cute.cosize(sP_layout) if mma_sums else 1

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, 2 * self.q_stages + 4 * self.stages
                                       + 2 * self.colsum_stages]
            sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sK_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sV_layout)], 1024]
            # column sums: P and f per consumer, then the ring (key, consumer, stage)
            sP: cute.struct.Align[cute.struct.MemRange[BFloat16, col_size], 1024]
            sF: cute.struct.Align[cute.struct.MemRange[
                BFloat16, cute.cosize(sF_layout) if mma_sums else 1], 1024]
            sCol: cute.struct.MemRange[
                Float32, BN * self.colsum_partials * self.colsum_stages if self.colsum else 1]
            # the gather loader's row indices, one tile per K/V stage
            sIdx: cute.struct.Align[cute.struct.MemRange[
                Int32, self.kv_loader.ring_words(self.stages) if self.gather else 1], 16]

        self.storage_cls = SharedStorage
        # split_kv: O and lse have n_splits * B batch entries, one CTA per (split, batch);
        # cluster_splits: O and lse have B, the n splits of a batch entry one cluster along z
        grid, cluster = split_launch(cute.ceil_div(mQ.shape[2], BM), mQ.shape[1], mQ.shape[0],
                                     mO.shape[0], self.split_kv,
                                     combine.splits if combine is not None else None)
        if cutlass.const_expr(self.persistent):
            grid = (num_ctas, 1, 1)
        self.kernel(qk_mma, pv_mma, col_mma, tma_q, tQ, tma_k, tK, tma_v, tV, tma_o, tO, mLSE,
                    mPrevLSE, mColsum, mIndices, mCounts,
                    mQ.shape[2], mK.shape[2], mQ.shape[1] // mK.shape[1],
                    scale * Float32(LOG2E), sQ_layout, sK_layout, sV_layout, sP_layout,
                    sF_layout, out_scale, mFullIndices, mFullCounts, mDocIds,
                    mQ.shape[0] if cutlass.const_expr(self.split_kv) else None,
                    mTileOrder, mO if cutlass.const_expr(combine is not None) else None).launch(
            grid=grid, block=(self.threads, 1, 1), stream=stream, cluster=cluster,
            **({"min_blocks_per_mp": 2, "preferred_smem_carveout": 100}
               if cutlass.const_expr(self.ctas_per_sm == 2) else {}))


    @cute.kernel
    def kernel(self, qk_mma: cute.TiledMma, pv_mma: cute.TiledMma, col_mma: cute.TiledMma,
               tma_q: cute.CopyAtom,
               tQ: cute.Tensor, tma_k: cute.CopyAtom, tK: cute.Tensor, tma_v: cute.CopyAtom,
               tV: cute.Tensor, tma_o: cute.CopyAtom, tO: cute.Tensor, mLSE: cute.Tensor,
               mPrevLSE, mColsum, mIndices, mCounts,
               s_q: Int32, s_kv: Int32, q_per_kv: Int32, scale_log2: Float32,
               sQ_layout: cute.ComposedLayout, sK_layout: cute.ComposedLayout,
               sV_layout: cute.ComposedLayout, sP_layout: cute.ComposedLayout,
               sF_layout: cute.ComposedLayout, out_scale, mFullIndices, mFullCounts, mDocIds,
               q_batch, mTileOrder, mO):
        """Shared state for every role, then the role's method: the producer warpgroup's
        ``load`` (and the column-sum writers), or the consumers' ``mma``."""
        BN = self.block_n
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head, batch = cute.arch.block_idx()
        if cutlass.const_expr(self.longest_first):
            m_block, head, batch = longest_first_tile(m_block, head, batch)
        if cutlass.const_expr(self.tile_order):
            m_block, head, batch = ordered_tile(mTileOrder, m_block, head, batch)
        out_batch = batch
        split, batch, n_splits = split_of_batch(
            self.split_kv, batch, q_batch, mLSE,
            self.cluster_combine.splits if cutlass.const_expr(self.cluster_combine) else None)
        kv_head = head // q_per_kv
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = warp // 4
        if warp == TMA_WARP:
            for atom in (tma_q, tma_k, tma_v, tma_o):
                if cutlass.const_expr(atom is not None):  # the gather loader has no K/V TMA
                    cpasync.prefetch_descriptor(atom)

        storage = cutlass.memory.SmemAllocator().allocate(self.storage_cls)
        sQ, sK, sV, pipes = self._smem_tiles(storage, sQ_layout, sK_layout, sV_layout)
        col_pipe, sCol = pipes.col_pipe, None
        if cutlass.const_expr(self.colsum):
            sCol = cute.make_tensor(storage.sCol.data_ptr(), cute.make_layout(
                (BN, self.colsum_partials, self.colsum_stages)))

        if cutlass.const_expr(self.persistent):
            self._persistent(qk_mma, pv_mma, col_mma, tma_q, tQ, tma_k, tK, tma_v, tV, tma_o,
                             tO, mLSE, mIndices, mCounts, mFullIndices, mFullCounts, mDocIds,
                             mTileOrder, sQ, sK, sV, storage, sP_layout, sF_layout, pipes, s_q,
                             s_kv, q_per_kv, scale_log2, tidx, warp, wg, out_scale)
        else:
            tile = TileCoord(m_block, head, kv_head, batch, out_batch)
            blocks, rows = self._key_block_view(tile, s_q, s_kv, mIndices, mCounts,
                                                mFullIndices, mFullCounts, mDocIds, split,
                                                n_splits)
            if wg == PRODUCER_WARPGROUP:
                self._producer_registers()
                if cutlass.const_expr(self.gather and self.kv_loader.producer_threads > 1):
                    # every producer thread gathers; Q still comes by TMA from one warp
                    self.load_gathered(tma_q, tQ, tK, tV, sQ, sK, sV, storage, pipes, blocks,
                                       tile, rows, s_kv, tidx, warp)
                elif warp == TMA_WARP:
                    self.load(tma_q, tQ, tma_k, tK, tma_v, tV, sQ, sK, sV, pipes, blocks, tile,
                              rows, s_kv)
                if cutlass.const_expr(self.colsum):
                    if warp >= 1 and warp <= self.colsum_writers:
                        self.sums.write(col_pipe, sCol, mColsum, blocks, s_kv, batch, head,
                                        m_block, tidx % 32, warp - 1)
            else:
                self._consumer_registers()
                self.mma(qk_mma, pv_mma, col_mma, sQ, sK, sV, storage, sP_layout, sF_layout,
                         sCol, pipes, blocks, tile, tma_o, tO, mLSE, mPrevLSE, s_q, scale_log2,
                         tidx, warp, out_scale)
            if cutlass.const_expr(self.cluster_combine is not None):
                # every role: the cluster's ranges have staged their partials (release /
                # acquire), the consumers merge their rows, and no CTA leaves (freeing the
                # shared memory its peers read) before all have
                cute.arch.cluster_arrive()
                cute.arch.cluster_wait()
                if wg != PRODUCER_WARPGROUP:
                    self.cluster_combine.combine(storage.sK.data_ptr(), mO, mLSE, batch, head,
                                                 m_block, s_q, tidx - 128)
                cute.arch.cluster_arrive()
                cute.arch.cluster_wait()

    def _producer_registers(self):
        if cutlass.const_expr(self.registers is not None):
            cute.arch.setmaxregister_decrease(self.registers[0])

    def _consumer_registers(self):
        if cutlass.const_expr(self.registers is not None):
            cute.arch.setmaxregister_increase(self.registers[1])

    @cute.jit
    def _key_block_view(self, tile, s_q, s_kv, mIndices, mCounts, mFullIndices, mFullCounts,
                        mDocIds, split, n_splits):
        """(the key-block iterator's view of ``tile``, the gather's key list or None)."""
        m_block, head, batch = tile.m_block, tile.head, tile.batch
        rows = None
        if cutlass.const_expr(self.gather):
            # the group's packed key list: visits walk packed positions [0, count), the count
            # clamped into [0, L] so a bad one never reads past the list (as the Ampere
            # kernel's; the op checks values in debug mode)
            # (a tile of block_m rows lies in one group: block_m divides group)
            grp = m_block // (self.group // self.block_m)
            rows = mIndices[batch, head, grp, None]
            count = cutlass.min(cutlass.max(mCounts[batch, head, grp], Int32(0)),
                                Int32(mIndices.shape[3]) * self.kv_loader.entry_keys)
            blocks = gather_key_tile(self.key_blocks, m_block, s_q, count, rows, grp, s_kv,
                                     batch, head, mFullCounts, mDocIds)
        else:
            blocks = key_block_tile(self.key_blocks, m_block, s_q, s_kv,
                                    (mIndices, mCounts, mFullIndices, mFullCounts, mDocIds),
                                    batch, head, split, n_splits)
        return blocks, rows

    @cute.jit
    def mma(self, qk_mma, pv_mma, col_mma, sQ, sK, sV, storage, sP_layout, sF_layout, sCol,
            pipes, blocks, tile, tma_o, tO, mLSE, mPrevLSE, s_q, scale_log2, tidx, warp,
            out_scale, states=None):
        """Consumers: fragments and running softmax state, the mainloop of the configured
        schedule, then the epilogue. ``states`` (persistent): the (Q, K, V) pipeline states
        carried from the previous tile, returned advanced past this one (Q's stage released
        once O has left it)."""
        BM, BN, D = self.block_m, self.block_n, self.head_dim
        ctid = tidx - 128
        thr_qk = qk_mma.get_slice(ctid)
        thr_pv = pv_mma.get_slice(ctid)
        tSrQ = qk_mma.make_fragment_A(thr_qk.partition_A(sQ))
        tSrK = qk_mma.make_fragment_B(thr_qk.partition_B(sK))
        tOrV = pv_mma.make_fragment_B(thr_pv.partition_B(sV))
        acc_O = cute.make_rmem_tensor(pv_mma.partition_shape_C((BM, D)), Float32)
        acc_O.fill(0.0)
        # wgmma atoms start with scale-d = 0 (overwrite): both MMAs accumulate (S from zeros)
        pv_mma.set(warpgroup.Field.ACCUMULATE, True)
        qk_mma.set(warpgroup.Field.ACCUMULATE, True)
        col_mma.set(warpgroup.Field.ACCUMULATE, True)
        acc_S = cute.make_rmem_tensor(qk_mma.partition_shape_C((BM, BN)), Float32)
        rows = cute.size(acc_mn_view(acc_O), mode=[0])
        row_max = cute.make_rmem_tensor(rows, Float32)
        row_sum = cute.make_rmem_tensor(rows, Float32)
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)

        carried = states is not None
        k_state, v_state = None, None
        if cutlass.const_expr(carried):
            q_state, k_state, v_state = states
        else:
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        pipes.q_pipe.consumer_wait(q_state)
        q_stage = 0
        if cutlass.const_expr(carried):
            q_stage = q_state.index
        rP = cute.make_rmem_tensor_like(acc_S, sQ.element_type)
        mc = ConsumerTile(qk_mma=qk_mma, pv_mma=pv_mma, tSrQ=tSrQ, tSrK=tSrK, tOrV=tOrV,
                          acc_S=acc_S, acc_O=acc_O, rP=rP, tOrP=acc_as_a_operand(rP),
                          k_pipe=pipes.k_pipe, v_pipe=pipes.v_pipe, row_max=row_max,
                          row_sum=row_sum, scale_log2=scale_log2, thr_qk=thr_qk, blocks=blocks,
                          wg_c=ctid // 128, q_stage=q_stage)
        col = None
        if cutlass.const_expr(self.colsum):
            col = self.sums.setup(col_mma, qk_mma, thr_qk, storage, sP_layout, sF_layout,
                                  mPrevLSE, s_q, tile.batch, tile.head, tile.m_block, ctid, rP,
                                  row_max, scale_log2, sCol, pipes.col_pipe)
        if cutlass.const_expr(not carried):
            self._open_pingpong(mc.wg_c)
        if cutlass.const_expr(self.overlap):
            k_state, v_state = self._mainloop_overlapped(mc, col, rows, k_state, v_state)
        else:
            k_state, v_state = self._mainloop_sequential(mc, col, k_state, v_state)

        if cutlass.const_expr(self.split_kv and self.cluster_combine is None):
            # the combine kernel (a programmatic dependent) may launch: its CTAs wait in
            # griddepcontrol.wait for this grid's writes, so its launch overlaps our tail
            cute.arch.griddepcontrol_launch_dependents()
        lse = cute.make_rmem_tensor(rows, Float32)
        softmax_finish(acc_O, row_max, row_sum, lse, scale_log2)
        if cutlass.const_expr(self.accumulate):
            acc_O.store(acc_O.load() * Float32(out_scale))  # the reduce-add store adds it
        if cutlass.const_expr(self.cluster_combine is not None):
            # the partial stays in the K ring for the cluster's combine (kernel), once every
            # consumer's last Q K^T has read it
            cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE),
                              number_of_threads=128 * self.consumer_wgs)
            self.cluster_combine.stage(acc_O, lse, thr_pv, pv_mma, storage.sK.data_ptr(), ctid)
        else:
            self.epilogue(acc_O, lse, thr_pv, pv_mma, sQ, tma_o, tO, mLSE, s_q,
                          tile.out_batch, tile.head, tile.m_block, ctid, warp, q_stage)
        if cutlass.const_expr(carried):
            if cutlass.const_expr(not self.async_store):
                # the store warp has waited for the TMA store to read O out of Q's stage
                cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE),
                                  number_of_threads=128 * self.consumer_wgs)
                pipes.q_pipe.consumer_release(q_state)
            # (async_store: the store warp frees the stage once its store has read O)
            q_state.advance()
        return q_state, k_state, v_state

    @cute.jit
    def epilogue(self, acc_O, lse, thr_pv, pv_mma, sQ, tma_o, tO, mLSE, s_q, batch, head,
               m_block, ctid, warp, q_stage=0):
        """O through Q's smem (stage ``q_stage``) and one TMA store (rows past S_q clipped),
        issued here or (``async_store``) by the store warp once every consumer has arrived on
        ``O_READY + q_stage``; lse per row."""
        D = self.head_dim
        dtype = sQ.element_type
        barrier_threads = 128 * self.consumer_wgs
        rO = cute.make_rmem_tensor_like(acc_O, dtype)
        rO.store(acc_O.load().to(dtype))
        sO = sQ[(None, None, q_stage)]
        r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype),
                                     pv_mma)
        thr_r2s = r2s.get_slice(ctid)
        # every consumer has finished its last Q K^T (Q's smem is free)
        cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE), number_of_threads=barrier_threads)
        cute.copy(r2s, thr_r2s.retile(rO), thr_r2s.partition_D(sO))
        cute.arch.fence_proxy("async.shared", space="cta")
        if cutlass.const_expr(self.async_store):
            store_lse(lse, thr_pv, mLSE, batch, head, m_block, (self.block_m, D), s_q, ctid)
            o_ready(q_stage, barrier_threads + 32, arrive=True)
        else:
            cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE),
                              number_of_threads=barrier_threads)
            if warp == STORE_WARP:
                self._store_o(tma_o, tO, sQ, q_stage, m_block, head, batch)
            store_lse(lse, thr_pv, mLSE, batch, head, m_block, (self.block_m, D), s_q, ctid)

    @cute.jit
    def _store_o(self, tma_o, tO, sQ, q_stage, m_block, head, batch):
        """One warp: the O tile in Q's stage ``q_stage`` to global by one TMA store, waited
        until it has read the stage."""
        gO = cute.local_tile(tO, (self.block_m, self.head_dim), (None, None, None, None))
        tOsO, tOgO = cpasync.tma_partition(tma_o, 0, cute.make_layout(1),
                                           cute.group_modes(sQ, 0, 2),
                                           cute.group_modes(gO, 0, 2))
        with cute.arch.elect_one():
            cute.copy(tma_o, tOsO[(None, q_stage)], tOgO[(None, m_block, 0, head, batch)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.jit
def longest_first_tile(x: Int32, y: Int32, z: Int32):
    """(m_block, head, batch) of CTA (x, y, z) of the (M, H, B) grid in the ``longest_first``
    walk (:func:`longest_first_coords` of its launch rank, x fastest: the order the hardware
    hands CTAs out in)."""
    n_m, n_h, n_b = cute.arch.grid_dim()
    return longest_first_coords(x + n_m * (y + n_h * z), n_m, n_h, n_b)


def longest_first_coords(rank, n_m, n_h, n_b):
    """(m_block, head, batch) of launch rank ``rank`` of an (M, H, B) grid: the ranks take
    chunks of ``LONGEST_FIRST_CHUNK_TILES // M`` (b, h) heads (at least one), and inside a
    chunk the query tiles from the last (the most causal key blocks) down to 0, head after
    head. Plain arithmetic (Python ints or DSL integers: tests/test_tile_scheduler.py checks it is
    a permutation)."""
    chunk_heads = cutlass.max(LONGEST_FIRST_CHUNK_TILES // n_m, 1)
    first = rank // (chunk_heads * n_m) * chunk_heads
    heads_here = cutlass.min(chunk_heads, n_h * n_b - first)
    within = rank - first * n_m
    bh = first + within % heads_here
    return n_m - 1 - within // heads_here, bh % n_h, bh // n_h
