"""Every kernel compiles for sm_80 and sm_90a without a GPU, with the instructions it is
designed around (checked through the same path as ``cute-kernels ptx``)."""

import pytest

from cute_kernels.registry import entries, instruction_mix, ptx_for

TARGETS = ["sm_80", "sm_90a"]

HOPPER = {"wgmma", "cp.async.bulk.tensor", "setmaxnreg", "mbarrier"}
AMPERE = {"mma.sync", "cp.async", "ldmatrix"}
# (kernel, variant) -> instruction families that must appear in its PTX, per target.
EXPECTED = {
    ("pack_mask", "flat"): {"sm_80": {"ld.global.v4"}, "sm_90a": {"ld.global.v4"}},
    ("unpack_mask", "flat"): {"sm_80": {"st.global.v4"}, "sm_90a": {"st.global.v4"}},
    ("pack_mask", "rows"): {"sm_80": set(), "sm_90a": set()},
    ("unpack_mask", "rows"): {"sm_80": set(), "sm_90a": set()},
    **{("gemm", v): {"sm_80": AMPERE, "sm_90a": HOPPER | {"stmatrix"}}
       for v in ("tn", "nn", "tt", "nt")},
    **{("gated_mlp_up", v): {"sm_80": AMPERE, "sm_90a": HOPPER}
       for v in ("swiglu", "geglu", "geglu_tanh", "reglu")},
    **{("attention", v): {"sm_80": AMPERE, "sm_90a": HOPPER}
       for v in ("d64", "d128", "d64-causal", "d128-causal")},
    **{("attention_colsum", v): {"sm_80": AMPERE, "sm_90a": HOPPER} for v in ("d64", "d128")},
    # K/V rows gathered by cp.async on both paths (Q and O by TMA on Hopper)
    **{("column_sparse_attention", v): {"sm_80": AMPERE, "sm_90a": HOPPER | {"cp.async"}}
       for v in ("d64-g128", "d64-g192", "d128-g128", "d128-g192")},
    # the block lists drive the dense kernels' loads
    **{("block_sparse_attention", v): {"sm_80": AMPERE, "sm_90a": HOPPER}
       for v in ("d64", "d128", "d128-causal")},
    # BCSR stages: cp.async + ldmatrix + mma.sync on both targets; the softmax is SIMT with
    # 16-byte loads and stores of the stored values
    # (the SDDMMs store their scores from a padded smem tile in 16-byte vectors)
    **{("bsr", v): {"sm_80": AMPERE, "sm_90a": AMPERE}
       for v in ("spmm-g64-d128", "spmm-g128-d128")},
    **{("bsr", v): {"sm_80": AMPERE | {"st.global.v4"}, "sm_90a": AMPERE | {"st.global.v4"}}
       for v in ("sddmm-g64-d128", "sddmm-g16-d64", "sddmm-chunks-g64-d128")},
    ("bsr", "softmax-g64"): {"sm_80": {"ld.global.v4", "st.global.v4", "shfl.sync"},
                             "sm_90a": {"ld.global.v4", "st.global.v4", "shfl.sync"}},
    # the MLP delta: the Ampere GEMM mainloop with gathered rows on sm_80, the warp-
    # specialized WGMMA kernels with a cp.async gather producer on sm_90a; mm1 stores the
    # packed delta and mm2 updates the output cache in 16-byte vectors; the writeback
    # reduces through the TMA unit on Hopper when the cache is M-major
    **{("column_sparse_mlp", v): {"sm_80": AMPERE | {"st.global.v4"},
                                  "sm_90a": HOPPER | {"cp.async", "st.global.v4"}}
       for v in ("up-m-major", "up-row-major", "up-gated")},
    ("column_sparse_mlp", "down"): {"sm_80": AMPERE | {"ld.global.v4", "st.global.v4"},
                                    "sm_90a": HOPPER | {"cp.async", "ld.global.v4",
                                                        "st.global.v4"}},
    ("column_sparse_mlp", "scatter-m-major"): {"sm_80": set(),
                                               "sm_90a": {"cp.reduce.async.bulk"}},
    ("column_sparse_mlp", "scatter-m-major-vec"): {"sm_80": set(),
                                                   "sm_90a": {"cp.reduce.async.bulk",
                                                              "ld.global.v4"}},
    ("column_sparse_mlp", "scatter-m-major-rmw"): {"sm_80": set(),
                                                   "sm_90a": {"ld.global.v4", "st.global.v4"}},
    ("column_sparse_mlp", "scatter-row-major"): {"sm_80": set(), "sm_90a": set()},
    # SIMT: 16-byte loads of the scores, shared-memory histograms
    **{("topk_indices", v): {"sm_80": {"ld.global.v4"}, "sm_90a": {"ld.global.v4"}}
       for v in ("bf16", "fp32")},
}


def test_every_registered_variant_has_expectations():
    registered = {(e.name, v) for e in entries().values() for v in e.variants}
    assert registered == set(EXPECTED)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(entries()))
def test_ptx_instructions(name, target):
    for variant, ptx in ptx_for(name, target).items():
        assert f".target {target}" in ptx
        mix = instruction_mix(ptx)
        for family in EXPECTED[(name, variant)][target]:
            assert mix[family] > 0, f"{name}[{variant}] on {target}: no {family}\n{mix}"
        # SIMT memory kernels must not have picked up tensor-core or async-copy machinery.
        if name in ("pack_mask", "unpack_mask", "topk_indices"):
            assert mix["mma.sync"] == mix["wgmma"] == mix["cp.async"] == 0


def test_flat_pack_loads_are_all_vectorized():
    """The main loop's loads are 16 bytes wide; byte loads exist only in the < 16-byte tail."""
    ptx = ptx_for("pack_mask", "sm_90a", "flat")["flat"]
    assert instruction_mix(ptx)["ld.global.v4"] == 8  # UNROLL vectors per thread


def test_ptx_rejects_unknown_arch_and_kernel():
    with pytest.raises(ValueError, match="arch must be one of"):
        ptx_for("pack_mask", "sm_70")
    with pytest.raises(ValueError, match="unknown kernel"):
        ptx_for("nope", "sm_80")
    with pytest.raises(ValueError, match="variants"):
        ptx_for("pack_mask", "sm_80", "diagonal")




@pytest.mark.parametrize("path, target, families", [("ampere", "sm_80", AMPERE),
                                                     ("ampere", "sm_90a", AMPERE),
                                                     ("hopper", "sm_90a", HOPPER)])
@pytest.mark.parametrize("head_dim, causal", [(64, False), (128, True)])
def test_attention_ptx(path, target, families, head_dim, causal):
    """The attention kernels compile with their instructions, with no local memory in the PTX
    and no register spills after ptxas (one build excepted, below)."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build(path, torch.bfloat16, head_dim, causal), target)
    mix = instruction_mix(ptx)
    assert all(mix[f] > 0 for f in families), mix
    assert "ld.local" not in ptx and "st.local" not in ptx
    # the softmax exponentials of one score tile (first and later key blocks)
    assert ptx.count("ex2.approx") >= 64
    if path == "ampere":  # O leaves the swizzled smem in 16-byte vectors (an element swizzle
        assert "ld.shared.v4" in ptx  # applied to byte addresses misaligned it: 8-byte loads)
    _assert_no_spills(ptx, target, allowed=attention_spill_allowance(path, head_dim, causal))


def attention_spill_allowance(path: str, head_dim: int, causal: bool) -> int:
    """Spill-store bytes the default plain attention builds may have (0 for the others).
    The causal D = 128 Hopper default (softmax/MMA overlap): ptxas 13.0 (V13.0.88) reports 20
    bytes (28 of loads); it stays the default because it measured 1.22x faster than the
    sequential loop, which does not spill (causal D = 128: 4.46 -> 3.66 ms, perf/RESULTS.md).
    The Ampere D = 128 default (4 warps of 32 rows): 160-184 bytes at 255 registers (sm_80 /
    sm_90a), 1.3x faster than the spill-free 8 warps (tuning/attention.py ampere_config).
    Each allowance leaves headroom for other ptxas versions; more is a regression."""
    if path == "ampere":
        return 256 if head_dim == 128 else 0
    return 32 if head_dim == 128 and causal else 0


def _assert_no_spills(ptx: str, target: str, allowed: int = 0) -> None:
    """Register spills (and serialized wgmmas) appear only after ptxas; check them where a
    ptxas is installed."""
    import re
    import shutil
    import subprocess
    import tempfile

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/k.ptx"
        with open(src, "w") as f:
            f.write(ptx)
        info = subprocess.run([ptxas, f"-arch={target}", "-v", src, "-o", f"{tmp}/k.cubin"],
                              capture_output=True, text=True, check=True).stderr
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", info)]
    assert spills and max(spills) <= allowed, info
    # a wgmma in a divergent path makes ptxas serialize every wgmma of the kernel (C7520:
    # 1.55x slower attention when a consumer branched around its skipped wgmmas)
    assert "wgmma.mma_async instructions are serialized" not in info, info


@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_colsum_ptx(head_dim):
    """The column-sum variant per default Hopper config, for both groups, and the shuffle
    sums. wgmma sums: one m64n8k16 chain per key tile with P read transposed from smem (stored
    by stmatrix after a proxy fence). mma.sync sums: P transposed in registers by movmatrix,
    one m16n8k16 per 16 keys, no smem staging. Shuffle sums: the reduce-scatter (C / 2, C / 4,
    C / 8 shuffles at lane offsets 16, 8, 4 for C columns per thread). fp32 ``red.add`` only
    where a group spans two CTAs; spills stay within 32 bytes (ptxas 13.0: 0 or 4)."""
    import collections
    import re

    import torch

    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.attention import hopper_config

    configs = [hopper_config(head_dim, False, True, group) for group in (128, 192)]
    if head_dim == 64:
        configs.append(dict(block_m=192, colsum=True, group=192, colsum_method="shuffle"))
    for cfg in configs:
        group = cfg["group"]
        ptx = compile_ptx(make_build("hopper", torch.bfloat16, head_dim, False, colsum=True,
                                     group=group, config=cfg), "sm_90a")
        mix = instruction_mix(ptx)
        assert all(mix[f] > 0 for f in HOPPER), mix
        kernel = AttentionSm90(head_dim, False, **cfg)
        assert f".reqntid {128 * (1 + kernel.consumer_wgs)}" in ptx
        reds = ptx.count("red.relaxed.gpu.global.add.f32")
        assert (reds > 0) == kernel.colsum_atomic, (group, reds)
        col_mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n8k16\.f32\.bf16\.bf16"
                             r" \{[^}]*\}, %rd\d+, %rd\d+, p, 1,\s*1, 1, 0;", ptx)
        sites = 2 if kernel.overlap else 1  # the overlapped loop peels its first key block
        syncs = re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16", ptx)
        if kernel.colsum_method == "mma_sync":
            # per site: 16 keys per mma.sync; every 8 x 8 block of P transposed once, plus the
            # two factor words
            assert len(syncs) == sites * kernel.block_n // 16, len(syncs)
            assert ptx.count("movmatrix.sync.aligned.m8n8.trans.b16") == \
                sites * (kernel.block_n // 4 + 2)
            assert not col_mma and "stmatrix" not in ptx
        elif kernel.colsum_method == "mma":
            # keys as M: block_n / 64 atoms x 4 k-steps, per issue site
            assert len(col_mma) == sites * kernel.block_n // 64 * 4, len(col_mma)
            assert "stmatrix.sync.aligned" in ptx and "fence.proxy.async.shared::cta" in ptx
        else:
            assert not col_mma
            cols, rounds = kernel.block_n // 4, kernel.colsum_rounds
            offsets = collections.Counter(
                re.findall(r"shfl\.sync\.bfly\.b32\s+%r\d+,\s*%r\d+,\s*(\d+),", ptx))
            expected = [sites * (cols >> (i + 1)) if i < rounds else 0 for i in range(3)]
            assert [offsets["16"], offsets["8"], offsets["4"]] == expected
        _assert_no_spills(ptx, "sm_90a", allowed=32)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_colsum_ampere_ptx(head_dim):
    """The Ampere column-sum variant: mma.sync and cp.async as the plain kernel, one fp32
    atomic add per (group, key) and thread, the shuffle reduce-scatter, no spills."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("ampere", torch.bfloat16, head_dim, False, colsum=True),
                      "sm_80")
    assert all(instruction_mix(ptx)[f] > 0 for f in AMPERE)
    assert ptx.count("atom.global.add.f32") == 1
    assert ptx.count("shfl.sync.bfly") >= 2 * (64 // 4) * 7 // 8  # two group slots
    _assert_no_spills(ptx, "sm_80")


@pytest.mark.parametrize("head_dim, causal", [(64, False), (128, True)])
def test_attention_overlap_ptx(head_dim, causal):
    """The softmax/MMA overlap variant keeps one WGMMA group in flight (wait_group 1)."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, head_dim, causal,
                                 config=dict(overlap=True)),
                      "sm_90a")
    assert "wgmma.wait_group.sync.aligned \t1;" in ptx
    assert all(instruction_mix(ptx)[f] > 0 for f in HOPPER)


@pytest.mark.parametrize("head_dim, causal", [(64, True), (128, False)])
def test_attention_persistent_ptx(head_dim, causal):
    """The persistent schedule: every role walks its CTA's list of the tile walks (read from
    global memory, not a gridDim.x stride), and Q's second stage adds a (full, empty) barrier
    pair."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, head_dim, causal,
                                 config=dict(persistent=True)), "sm_90a")
    plain = compile_ptx(make_build("hopper", torch.bfloat16, head_dim, causal), "sm_90a")
    assert "%nctaid.x" not in ptx and "%nctaid.x" not in plain
    # the CTA's list bounds and each role's next tile come from the walks in global memory
    assert ptx.count("ld.global") >= 3 and "ld.global" not in plain
    assert all(instruction_mix(ptx)[f] > 0 for f in HOPPER)
    assert ptx.count("mbarrier.init.shared") == plain.count("mbarrier.init.shared") + 2


def test_attention_small_tiles_ptx():
    """128 x 64 tiles, three K and V stages (two Q: 2 x 2 + 3 x 4 barriers), the consumers
    taking turns, persistent (the short packed block lists' shape, dense here), no spills.
    The 64 x 64 tiles two CTAs per SM (the short gathers' shape) asking
    ptxas for two CTAs per SM (``.minnctapersm 2``: 128 registers at launch), the producer
    giving registers to the consumer (setmaxnreg both ways: one consumer warpgroup
    reallocates nothing otherwise), no spills; an invalid request is refused before
    compiling."""
    import torch

    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    short = compile_ptx(make_build("hopper", torch.bfloat16, 128, True, config=dict(
        block_n=64, stages=3, overlap=True, pingpong=True, persistent=True)), "sm_90a")
    assert ".minnctapersm" not in short and "bar.arrive 2, 256;" in short
    assert short.count("mbarrier.init.shared") == 16
    _assert_no_spills(short, "sm_90a")
    ptx = compile_ptx(make_build("hopper", torch.bfloat16, 128, True, config=dict(
        block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True)),
        "sm_90a")
    assert ".minnctapersm 2" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 \t208;" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 \t40;" in ptx
    assert all(instruction_mix(ptx)[f] > 0 for f in HOPPER)
    _assert_no_spills(ptx, "sm_90a")
    with pytest.raises(ValueError, match="ctas_per_sm must be 1, or 2 with block_m 64"):
        AttentionSm90(128, True, ctas_per_sm=2)
    with pytest.raises(ValueError, match="half an SM"):
        AttentionSm90(128, True, block_m=64, block_n=128, stages=2, ctas_per_sm=2)


@pytest.mark.parametrize("d", [64, 128])
def test_attention_masks_are_selects(d):
    """The causal and residue masks hide scores by one select each (``mask_mod.hide_score``):
    as runtime ifs, LLVM chained the selects quadratically in a row's scores (2,054
    ``selp.f32`` in the D = 128 persistent causal build, 134 as selects; perf/RESULTS.md
    "Masks as selects"). The Ampere kernel keeps its ifs (``select=False``)."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, d, True, persistent=True), "sm_90a")
    assert 0 < ptx.count("selp.f32") < 300


@pytest.mark.parametrize("causal", [False, True])
def test_attention_d64_persistent_ptx(causal):
    """D = 64's default Hopper builds: 64 x 128 tiles for two CTAs per SM, persistent (the
    walks' bounds read from global memory), at most a few bytes of spill."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, 64, causal, persistent=True),
                      "sm_90a")
    assert ".minnctapersm 2" in ptx and "%nctaid.x" not in ptx
    assert all(instruction_mix(ptx)[f] > 0 for f in HOPPER)
    # causal 64 x 128 with the async store: 24 bytes, six hoisted smem addresses stored
    # before the walk and reloaded once per tile (perf/sass_spills.py on the device)
    _assert_no_spills(ptx, "sm_90a", allowed=24)


@pytest.mark.parametrize("causal, turns", [(False, None), (False, True), (True, True)])
def test_attention_d64_tall_ptx(causal, turns):
    """D = 64 with long sequences (``tall``; None: the route's own form, ``TALL_TURNS``):
    192 x 128 persistent tiles, three consumer warpgroups overlapping softmax and MMAs
    (taking turns: ``pingpong``), one CTA per SM; the causal build spills 12 bytes."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    config = None if turns is None else dict(block_m=192, overlap=True, persistent=True,
                                             pingpong=True)
    ptx = compile_ptx(make_build("hopper", torch.bfloat16, 64, causal, persistent=True,
                                 tall=True, config=config), "sm_90a")
    assert ".minnctapersm" not in ptx and "%nctaid.x" not in ptx
    assert ".reqntid 512, 1, 1" in ptx  # a producer and three consumer warpgroups
    assert all(instruction_mix(ptx)[f] > 0 for f in HOPPER)
    _assert_no_spills(ptx, "sm_90a", allowed=16 if causal else 0)


@pytest.mark.parametrize("persistent", [False, True])
def test_attention_overlap_pingpong_ptx(persistent):
    """``pingpong`` with the overlapped mainloop (the persistent D = 128 default): the last
    consumer opens the first turn once (``bar.arrive 2``, before the walk when persistent),
    and each consumer waits for its turn and passes it on around the first Q K^T, each
    (Q K^T, P V) pair and the last P V: three turn points of 256 threads each."""
    import re

    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.attention import hopper_config

    cfg = (hopper_config(128, True, persistent=True) if persistent
           else dict(overlap=True, pingpong=True))
    assert cfg.get("pingpong") and cfg.get("overlap")
    ptx = compile_ptx(make_build("hopper", torch.bfloat16, 128, True, config=cfg), "sm_90a")
    assert ptx.count("bar.arrive 2, 256;") == 1
    assert len(re.findall(r"bar\.sync \t%r\d+, 256;", ptx)) == 3
    assert len(re.findall(r"bar\.arrive %r\d+, 256;", ptx)) == 3
    assert "wgmma.wait_group.sync.aligned \t1;" in ptx


@pytest.mark.parametrize("two_ctas", [False, True])
def test_attention_async_store_ptx(two_ctas):
    """The persistent schedule's O store by a producer warp (``async_store``, the default):
    the consumers arrive on the stage's ``O_READY`` barrier (9 or 10, 128 consumer threads
    per warpgroup + the store warp) without waiting, the store warp waits on it, stores,
    waits for the store's smem read and frees Q's stage; with ``async_store=False`` the
    consumers store and no O_READY barrier exists. A configuration that cannot take it is
    refused."""
    import torch

    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.attention import hopper_config

    cfg = (dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True)
           if two_ctas else hopper_config(128, True, persistent=True))
    threads = 128 * (1 if two_ctas else 2) + 32
    ptx = compile_ptx(make_build("hopper", torch.bfloat16, 128, True, config=cfg), "sm_90a")
    for stage in (9, 10):
        assert f"bar.arrive {stage}, {threads};" in ptx
        assert f"bar.sync \t{stage}, {threads};" in ptx
    assert ptx.count("cp.async.bulk.wait_group.read") == 1
    sync = compile_ptx(make_build("hopper", torch.bfloat16, 128, True,
                                  config=dict(cfg, async_store=False)), "sm_90a")
    assert "bar.arrive 9" not in sync and "bar.sync \t9" not in sync
    assert sync.count("cp.async.bulk.wait_group.read") == 1
    with pytest.raises(ValueError, match="async_store applies to the persistent schedule"):
        AttentionSm90(128, True, overlap=True, async_store=True)
    with pytest.raises(ValueError, match="async_store applies to the persistent schedule"):
        AttentionSm90(128, False, block_m=128, block_n=128, gather=True, group=128,
                      persistent=True, async_store=True)


@pytest.mark.parametrize("entry_keys, persistent", [(1, False), (1, True), (16, False),
                                                    (32, False), (32, True), (64, False)])
def test_column_sparse_short_lists_ptx(entry_keys, persistent):
    """Short gathered lists (``hopper_gather_config(short=True)``), WGMMA, no spills. Single
    keys: 64 x 64 tiles for two CTAs per SM, gathered row by row (cp.async). Lists of 16-,
    32- or 64-key blocks: 128 x 64 tiles, one CTA per SM, the two consumers taking turns,
    one TMA box per block and 64-column half (``gather_tma``): per key tile 64 / E boxes of K
    and as many of V, and no cp.async at all."""
    import torch

    from cute_kernels.ops.column_sparse import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, 128, 128, False,
                                 entry_keys=entry_keys, short=True, persistent=persistent,
                                 ordered=not persistent), "sm_90a")
    assert (".minnctapersm 2" in ptx) == (entry_keys == 1)
    assert ("bar.arrive 2, 256;" in ptx) == (entry_keys > 1)  # the turns' opening
    mix = instruction_mix(ptx)
    assert all(mix[f] > 0 for f in HOPPER)
    if entry_keys == 1:
        assert mix["cp.async"] > 0
    else:
        assert mix["cp.async"] == 0
        # Q, K, V and O move in 64-column halves: 2 + 2 x 2 x (64 / E) + 2 bulk tensor copies
        # (the persistent walk issues Q in its loop and once before it)
        loads = 2 * 2 * (64 // entry_keys)
        assert mix["cp.async.bulk.tensor"] in (4 + loads, 6 + loads), mix
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("target", TARGETS)
def test_split_combine_ptx(head_dim, target):
    """The split-KV combine: shuffle reductions of the partial lse, vector loads of each
    split's O chunk (4 or 2 bf16 per lane), no spills; on sm_90 a programmatic dependent
    launch that first waits for the split kernel's grid (griddepcontrol.wait)."""
    import torch

    from cute_kernels.ops.attention import make_combine_build
    from cute_kernels.runtime.arch import target_has_pdl
    from cute_kernels.runtime.compile import compile_ptx

    pdl = target_has_pdl(target)
    assert pdl == (target == "sm_90a")
    ptx = compile_ptx(make_combine_build(torch.bfloat16, head_dim, pdl=pdl), target)
    assert instruction_mix(ptx)["shfl.sync"] >= 10  # max and sum butterflies, 5 steps each
    assert f"ld.global.v{head_dim // 32}.b16" in ptx
    assert ("griddepcontrol.wait" in ptx) == pdl
    _assert_no_spills(ptx, target)


@pytest.mark.parametrize("target", TARGETS)
def test_split_kv_build_holds_both_launches(target):
    """The op's split-KV build (``SplitKVAttention``) compiles the split kernel and the combine
    kernel into one module (one host call launches both); on sm_90 the combine waits for the
    split kernel's grid (programmatic dependent launch)."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.arch import PATH_OF_TARGET, target_has_pdl
    from cute_kernels.runtime.compile import compile_ptx

    pdl = target_has_pdl(target)
    ptx = compile_ptx(make_build(PATH_OF_TARGET[target], torch.bfloat16, 128, False,
                                 split_kv=True, short_query=True, combine_pdl=pdl), target)
    assert ptx.count(".entry") == 2
    assert ("griddepcontrol.wait" in ptx) == pdl
    assert ("griddepcontrol.launch_dependents" in ptx) == pdl


def test_split_kernel_lets_the_combine_launch_early():
    """The Hopper split-KV kernel signals griddepcontrol.launch_dependents (after its key
    loop); the plain kernel does not."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    for split_kv in (True, False):
        ptx = compile_ptx(make_build("hopper", torch.bfloat16, 128, False, split_kv=split_kv,
                                     short_query=True), "sm_90a")
        assert ("griddepcontrol.launch_dependents" in ptx) == split_kv


@pytest.mark.parametrize("head_dim, splits", [(128, 8), (64, 3)])
def test_cluster_combine_ptx(head_dim, splits):
    """The split kernel that combines its cluster's partials: two cluster barriers (staged,
    then read), the peers' lse and 16-byte O chunks read through ld.shared::cluster, o and
    lse stored straight to global, no combine launch to signal, no spills."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, head_dim, False, split_kv=True,
                                 short_query=True, cluster_splits=splits), "sm_90a")
    assert ptx.count(".entry") == 1
    assert ptx.count("barrier.cluster.arrive") == 2 and ptx.count("barrier.cluster.wait") == 2
    assert ptx.count("ld.shared::cluster.v4.f32") == splits  # one per peer, unrolled
    assert ptx.count("ld.shared::cluster.f32") == splits  # the peers' lse of a row
    assert "griddepcontrol" not in ptx
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("head_dim, rows, causal, splits, cluster", [
    (128, 8, False, 8, True), (64, 16, True, 3, False), (128, 8, True, 1, False),
    (128, 64, False, 4, True)])
def test_swap_ab_decode_ptx(head_dim, rows, causal, splits, cluster):
    """The swap-AB decode kernel: per key block (block_n / 64) x (D / 16) wgmmas m64nRk16 for
    S^T and (D / 64) x (block_n / 16) for O^T, both on shared-memory operands (no register
    A), two named barriers of the consumer warpgroup per block and one for the final sums,
    the cluster's combine or the combine kernel's dependent launch, no spills, no serialized
    wgmma."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.attention import decode_config

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, head_dim, causal,
                                 split_kv=splits > 1,
                                 config=decode_config(head_dim, rows, splits if cluster else 1)),
                      "sm_90a")
    wgmma = f"wgmma.mma_async.sync.aligned.m64n{rows}k16.f32.bf16.bf16"
    assert ptx.count(wgmma) == 2 * (128 // 64) * (head_dim // 16)  # S^T and O^T, unrolled
    assert ptx.count("wgmma.mma_async") == ptx.count(wgmma)
    assert ptx.count("bar.sync \t11, 128;") == 3  # the maxima, P^T, the final sums
    assert ptx.count("barrier.cluster.arrive") == (2 if cluster else 0)
    assert ("griddepcontrol.launch_dependents" in ptx) == (splits > 1 and not cluster)
    _assert_no_spills(ptx, "sm_90a")


def test_swap_ab_decode_rules():
    """``DecodeSm90``: rows a power of two 8-64, 64 or 128 keys per block, a cluster only for
    a split launch, and the K/V rings within a CTA's shared memory."""
    from cute_kernels.kernels.attention.decode_sm90 import DecodeSm90

    for kwargs, match in ((dict(rows=24), "rows must be one of"),
                          (dict(rows=128), "rows must be one of"),
                          (dict(block_n=96), "block_n must be"),
                          (dict(block_n=256), "block_n must be"),
                          (dict(stages=1), "stages must be"),
                          (dict(cluster_splits=4), "split_kv"),
                          (dict(stages=4), "shared memory"),
                          (dict(split_kv=True, cluster_splits=9), "2 to 8")):
        with pytest.raises(ValueError, match=match):
            DecodeSm90(128, False, **kwargs)
    with pytest.raises(ValueError, match="head_dim"):
        DecodeSm90(96, False)
    assert DecodeSm90(128, True, rows=64, split_kv=True, cluster_splits=8).smem_bytes() < (
        227 * 1024)


def test_cluster_splits_rules():
    """``cluster_splits`` needs the split-KV kernel, 2-8 splits, no register reallocation
    (the merge runs where both roles' budgets meet) and a K ring that holds the staged fp32
    partial."""
    from cute_kernels.kernels.attention.sm90 import AttentionSm90

    with pytest.raises(ValueError, match="split_kv"):
        AttentionSm90(128, False, block_m=64, cluster_splits=4)
    with pytest.raises(ValueError, match="2 to 8"):
        AttentionSm90(128, False, block_m=64, split_kv=True, cluster_splits=9)
    with pytest.raises(ValueError, match="reallocate no registers"):
        AttentionSm90(128, False, block_m=128, split_kv=True, cluster_splits=2)
    with pytest.raises(ValueError, match="reallocate no registers"):
        AttentionSm90(128, False, block_m=64, block_n=64, ctas_per_sm=2, split_kv=True,
                      cluster_splits=8)
    with pytest.raises(ValueError, match="K ring"):
        AttentionSm90(128, False, block_m=64, block_n=32, split_kv=True, cluster_splits=2)
    assert AttentionSm90(64, False, block_m=64, split_kv=True, cluster_splits=8).cluster_combine


@pytest.mark.parametrize("drift", [False, True])
def test_gemm_drift_limiter_ptx(drift):
    """With the wave drift limiter the producer polls the tile counter with an acquire load
    and nanosleep between polls, and one lane per cluster adds to it with a release; without
    it, none of that is compiled in."""
    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k", Epilogue(),
                                 drift=drift), "sm_90a")
    counts = [ptx.count(s) for s in ("ld.acquire.gpu.global.b32", "nanosleep.u32",
                                     "red.release.gpu.global.add.s32")]
    assert all(counts) if drift else not any(counts), counts
    _assert_no_spills(ptx, "sm_90a")


def test_drift_limiter_schedule(monkeypatch):
    """The scheduler turns the limiter on for many waves of long-K tiles only."""
    import torch

    import cute_kernels.ops.gemm as gemm_ops

    monkeypatch.setattr(gemm_ops, "sm_count", lambda device: 132)

    def drift(m, n, k):
        a, b = torch.empty(m, k, device="meta"), torch.empty(n, k, device="meta")
        return gemm_ops.schedule(a, b).drift

    assert drift(65536, 106496, 16384) and drift(16384, 106496, 16384)
    assert not drift(65536, 106496, 4096)  # short K
    assert not drift(4096, 4096, 16384)  # a few waves


def _entries(ptx: str) -> list[str]:
    """The PTX of each kernel entry of a build, in order."""
    import re

    return [e for e in re.split(r"(?=\.visible \.entry)", ptx)
            if e.startswith(".visible .entry")]


def test_gemm_skinny_tiles_ptx():
    """The unsplit swap-AB GEMM build (8 stages): one WGMMA shape m64n16k16, TMA loads and
    stores, C^T through transposing stmatrix, no spills."""
    import re

    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k",
                                 Epilogue(bias=True, activation="silu", bias_dim=0),
                                 torch.bfloat16, 1, (128, 16, 128), False, 8, batched=False,
                                 c_transposed=True), "sm_90a")
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)) == {
        "m64n16k16"}
    mix = instruction_mix(ptx)
    assert mix["cp.async.bulk.tensor"] > 0 and mix["setmaxnreg"] > 0
    assert "stmatrix.sync.aligned.m8n8.x4.trans" in ptx
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("swap, tile, a_major, b_major, out_dtype, activation, bias_dtype", [
    (True, (128, 32, 64), "m", "n", "bfloat16", None, None),  # swap-AB + split-K
    (True, (64, 16, 128), "k", "k", "float16", "gelu_tanh", "float32"),  # 64-row swapped
    (False, (128, 128, 64), "k", "n", "float32", "silu", "bfloat16")])  # split-K
def test_split_k_ptx(swap, tile, a_major, b_major, out_dtype, activation, bias_dtype):
    """The split-K / swap-AB route's one host function (``SplitKGemm``): two kernels. The
    GEMM (8 stages): one WGMMA shape m64n{tile_n}k16, TMA loads, its fp32 partials stored by
    plain smem stores and TMA, no stmatrix. The finishing pass: SIMT only (no tensor cores,
    no async copies), 16-byte stores of the output, the activation compiled in only when
    asked. Neither spills."""
    import re

    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops.gemm import split_build
    from cute_kernels.runtime.compile import compile_ptx

    bias = getattr(torch, bias_dtype) if bias_dtype else None
    ptx = compile_ptx(split_build("hopper", torch.bfloat16, getattr(torch, out_dtype), a_major,
                                  b_major, swap, Epilogue(bias=bias is not None,
                                                          activation=activation),
                                  bias, 1, tile, 8), "sm_90a")
    gemm, reduce = _entries(ptx)
    assert "GemmSm90" in gemm.splitlines()[0] and "SplitKReduce" in reduce.splitlines()[0]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", gemm)) == {
        f"m64n{tile[1]}k16"}
    mix = instruction_mix(gemm)
    assert mix["cp.async.bulk.tensor"] > 0 and mix["setmaxnreg"] > 0
    assert "stmatrix" not in gemm
    mix = instruction_mix(reduce)
    assert mix["mma.sync"] == mix["wgmma"] == mix["cp.async"] == 0
    assert "st.global.v4" in reduce
    assert ("ex2.approx" in reduce or "tanh.approx" in reduce) == (activation is not None)
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("a_rows", [None, 8, 32])
def test_gated_decode_tile_loads_only_its_a_rows(a_rows):
    """The gated decode tile (64 x 128, 128 deep) with ``a_rows``: each stage's full barrier
    expects the A box of that many rows plus the weight's 128 x 128 box (bf16), one m64n128k16
    WGMMA shape, no spills; ``a_rows`` that does not divide the tile, or with A multicast, is
    refused; the op loads the smallest of 8 / 16 / 32 rows that holds M on that tile only."""
    import re

    import torch

    from cute_kernels.kernels.gemm.sm90 import GemmSm90
    from cute_kernels.ops.gated_mlp import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.gemm import GATED_HALF_TILE, gated_a_rows

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k", "swiglu",
                                 None, 1, GATED_HALF_TILE, batched=False, max_stages=6,
                                 a_rows=a_rows), "sm_90a")
    stage_bytes = ((a_rows or 64) + 128) * 128 * 2
    regs = set(re.findall(r"expect_tx\S* \S+, \[\S+\], (%r\d+);", ptx))
    assert {re.search(rf"mov\.b32\s+{r}, (\d+);", ptx).group(1) for r in regs} == {
        str(stage_bytes)}
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)) == {
        "m64n128k16"}
    _assert_no_spills(ptx, "sm_90a")
    for bad in ({"a_rows": 24}, {"a_rows": 12}, {"a_rows": 32, "cluster_n": 2}):
        with pytest.raises(ValueError, match="a_rows"):
            GemmSm90(tile=(64, 128, 128), **bad)
    assert [gated_a_rows(m, GATED_HALF_TILE) for m in (1, 8, 9, 16, 17, 32, 33, 64)] == [
        8, 8, 16, 16, 32, 32, None, None]
    assert gated_a_rows(1, (128, 256, 64)) is None


def test_gemm_epilogue_subtiles_cover_the_tile():
    """The epilogue's subtiles tile N exactly: a 240-wide tile stores 15 subtiles of 16
    columns (in 32-wide ones its last 16 columns went unstored), and a subtile width that does
    not divide N is refused."""
    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.kernels.gemm.sm90 import GemmSm90
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    assert GemmSm90(tile=(128, 240, 64)).epi_tile == (128, 16)
    assert GemmSm90(tile=(128, 256, 64)).epi_tile == (128, 32)
    # 192-wide tiles store three 64-wide subtiles, except where a cluster split shares the
    # subtiles out in two; 256-row tiles take the 32 / 16 rule
    assert GemmSm90(tile=(128, 192, 64)).epi_tile == (128, 64)
    assert GemmSm90(tile=(128, 192, 64), cluster_k=2, cluster_m=1).epi_tile == (128, 32)
    assert GemmSm90(tile=(256, 160, 64)).epi_tile == (256, 32)
    assert GemmSm90(tile=(256, 144, 64)).epi_tile == (256, 16)
    with pytest.raises(ValueError, match="epi_n"):
        GemmSm90(tile=(128, 240, 64), epi_n=32)
    with pytest.raises(ValueError, match="epi_stages"):
        GemmSm90(tile=(128, 256, 64), epi_stages=0)
    # a 2x1 cluster splits B's 152 rows into 76-row shares: refused before any trace (the DSL
    # aborts the process on it)
    with pytest.raises(ValueError, match="8-row shares"):
        GemmSm90(tile=(128, 152, 64), epi_n=8, cluster_m=2)
    GemmSm90(tile=(128, 152, 64), epi_n=8, cluster_m=1)
    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k", Epilogue(),
                                 None, 2, (128, 240, 64), batched=False), "sm_90a")
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared") == 240 // 16


@pytest.mark.parametrize("tile, stages, ring", [((128, 224, 64), 4, 6), ((128, 256, 64), 4, 4),
                                               ((128, 192, 64), 4, 3), ((256, 160, 64), 3, 4),
                                               ((128, 240, 64), 4, 10)])
def test_gemm_c_ring(tile, stages, ring):
    """The C ring grows into the smem the pipeline stages leave (no stage is given up for it),
    up to one buffer per subtile, and the epilogue takes one named barrier per subtile plus one
    per tile; a store waits for an older one's smem read only where a subtile reuses a buffer
    (``wait_group.read ring - 2``), and before each tile's first subtile and the exit (0).
    A ring of 1 is refused for a tile of several subtiles."""
    import re

    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.kernels.gemm.sm90 import GemmSm90
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    build = make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k", Epilogue(), None, 2,
                       tile, batched=False)
    ptx = compile_ptx(build, "sm_90a")
    kernel = build.fn
    n_sub = tile[1] // kernel.epi_tile[1]
    assert (kernel.stages, kernel.c_ring) == (stages, ring)
    assert len(re.findall(r"\bbar\.sync\s+1, 256;", ptx)) == n_sub + 1
    waits = re.findall(r"cp\.async\.bulk\.wait_group\.read\s+(\d+);", ptx)
    assert sorted(waits) == sorted(["0", "0"] + [str(ring - 2)] * max(0, n_sub - ring))
    with pytest.raises(ValueError, match="epi_stages"):
        GemmSm90(tile=tile, epi_stages=1)
    GemmSm90(tile=(128, 32, 64), epi_stages=1)  # one subtile: a ring of one


def test_gemm_256_row_tiles_ptx():
    """A 256-row tile runs two consumer warpgroups of two m64 WGMMA rows each: twice the
    m64n160k16 WGMMAs of a 128-row tile, the same 384 threads, 32-wide subtiles (5 TMA stores
    per tile; 16-wide ones where 32 does not divide N) and no spills; the forms it does not
    take are refused before any trace."""
    import re

    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.kernels.gemm.sm90 import GemmSm90
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    def build(tile):
        return compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k",
                                      Epilogue(), None, 2, tile, batched=False), "sm_90a")

    tall, plain = build((256, 160, 64)), build((128, 160, 64))
    wgmma = r"wgmma\.mma_async\.sync\.aligned\.m64n160k16"
    assert len(re.findall(wgmma, tall)) == 2 * len(re.findall(wgmma, plain)) > 0
    assert GemmSm90(tile=(256, 160, 64)).threads == GemmSm90(tile=(128, 160, 64)).threads
    assert tall.count("cp.async.bulk.tensor.2d.global.shared") == 160 // 32
    assert build((256, 144, 64)).count("cp.async.bulk.tensor.2d.global.shared") == 144 // 16
    _assert_no_spills(tall, "sm_90a")
    for bad in (dict(gated="swiglu"), dict(cluster_k=2, cluster_m=1), dict(stream_k=True),
                dict(c_transposed=True)):
        with pytest.raises(ValueError, match="256-row"):
            GemmSm90(tile=(256, 160, 64), **bad)


@pytest.mark.parametrize("tile, cluster_m, stages, ring", [((128, 176, 64), 2, 5, 4),
                                                           ((64, 256, 64), 1, 5, 3)])
def test_gemm_pingpong_ptx(tile, cluster_m, stages, ring):
    """Pingpong consumers: each consumer warpgroup runs a whole tile (twice the WGMMAs of its
    cooperative half at 128 rows), stores it from its own C ring (both rings in smem, as the
    stages leave room) under its own 128-thread barrier, and the mainloops take turns through
    a 256-thread barrier (bar.sync to wait, bar.arrive to pass); nothing spills. The forms it
    does not take are refused before any trace."""
    import re

    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.kernels.gemm.sm90 import GemmSm90
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    def build(pingpong):
        return make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k", Epilogue(), None,
                          cluster_m, tile, batched=False, pingpong=pingpong)

    pp, coop = build(True), build(False)
    ptx, coop_ptx = compile_ptx(pp, "sm_90a"), compile_ptx(coop, "sm_90a")
    kernel = pp.fn
    assert (kernel.stages, kernel.c_ring, kernel.threads) == (stages, ring, 384)
    wgmma = rf"wgmma\.mma_async\.sync\.aligned\.m64n{tile[1]}k16"
    rows = tile[0] // 64  # m64 WGMMA rows per consumer warpgroup
    assert len(re.findall(wgmma, ptx)) == rows * tile[2] // 16
    assert len(re.findall(wgmma, coop_ptx)) == max(1, rows // 2) * tile[2] // 16
    n_sub = tile[1] // kernel.epi_tile[1]
    # the epilogue's barrier id is the warpgroup's (a register), 128 threads each
    assert len(re.findall(r"\bbar\.sync\s+%r\d+, 128;", ptx)) == n_sub + 1
    assert len(re.findall(r"\bbar\.sync\s+%r\d+, 256;", ptx)) == 1
    assert len(re.findall(r"\bbar\.arrive\s+%r\d+, 256;", ptx)) == 1
    # the cooperative build keeps its constant-id barriers and takes no turns
    assert not re.search(r"\bbar\.(sync|arrive)\s+%r", coop_ptx)
    _assert_no_spills(ptx, "sm_90a")
    for bad in (dict(tile=(256, 160, 64)), dict(tile=(192, 160, 64)), dict(gated="swiglu"),
                dict(cluster_k=2, cluster_m=1), dict(stream_k=True), dict(c_transposed=True),
                dict(a_rows=32, tile=(64, 128, 64))):
        with pytest.raises(ValueError, match="pingpong"):
            GemmSm90(**{"tile": tile, **bad}, pingpong=True)


@pytest.mark.parametrize("tile, out_dtype", [((128, 256, 64), "bfloat16"),
                                              ((192, 160, 64), "float32")])
def test_gemm_stream_k_ptx(tile, out_dtype):
    """Stream-K: a partial leaves in 16-byte stores and comes back in 16-byte loads, every
    fp32 accumulator of the consumer thread once, in the two units that write one (a tile's
    first part, a middle part) and the one that reads them (a tile's last, in a loop over
    the tile's earlier clusters: no chain); a release add raises the flag and an acquire
    load polls it; four mainloops (first part, whole tiles, middle, last part) plus the
    whole waves' one; nothing spills. A gated or drift-limited kernel refuses it."""
    import re

    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.kernels.gemm.sm90 import GemmSm90
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, getattr(torch, out_dtype), "k", "k",
                                 Epilogue(bias=True, activation="gelu_tanh"), torch.bfloat16, 2,
                                 tile, batched=False, stream_k=True), "sm_90a")
    values = tile[1] * 64 // 128  # fp32 accumulators per consumer thread (64 rows each)
    assert ptx.count("st.global.v4.b32") == 2 * values // 4
    assert ptx.count("ld.global.v4.b32") == values // 4
    assert "red.release.gpu.global.add.s32" in ptx and "ld.acquire.gpu.global.b32" in ptx
    # one m64n{N}k16 per k-block of 16 (each consumer warpgroup runs the same code)
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == 5 * (64 // 16)
    _assert_no_spills(ptx, "sm_90a")
    with pytest.raises(ValueError, match="stream_k"):
        GemmSm90(stream_k=True, gated="swiglu")
    with pytest.raises(ValueError, match="stream_k"):
        GemmSm90(stream_k=True, drift_slack=0)


@pytest.mark.parametrize("pdl, route", [(False, "split"), (True, "split"), (True, "short")])
def test_gemm_dependent_launch_ptx(pdl, route):
    """A programmatic dependent launch (the default of the cluster split and of a short
    one-wave launch in 2x1 clusters): every thread waits for the kernel before
    (griddepcontrol.wait) once, before the roles split, and the next kernel may launch at
    once; without it neither instruction is compiled in."""
    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.gemm import schedule

    assert schedule(768, 1024, 8192, 1, 132).pdl and not schedule(4096, 4096, 4096, 1, 132).pdl
    short = schedule(1024, 1024, 1024, 1, 132)  # 64 x 128 tiles in 2x1 clusters
    assert short.pdl and short.cluster_m == 2 and short.cluster_k == 1
    build = (dict(cluster_m=1, tile=(128, 128, 64), cluster_k=2) if route == "split"
             else dict(cluster_m=short.cluster_m, tile=short.tile, max_stages=short.max_stages))
    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k", Epilogue(),
                                 None, batched=False, pdl=pdl, **build), "sm_90a")
    assert ptx.count("griddepcontrol.wait") == ptx.count("griddepcontrol.launch_dependents") == pdl
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("tile, cluster_k", [((128, 128, 64), 2), ((128, 64, 64), 2),
                                              ((64, 128, 64), 4)])
def test_gemm_cluster_split_ptx(tile, cluster_k):
    """Split-K in a cluster: each thread pushes its partial of every peer's share with
    16-byte st.async (complete_tx on the peer's mbarrier), one branch per rank; the K slices
    are summed and stored in the launch (no fp32 workspace), and nothing spills."""
    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k",
                                 Epilogue(bias=True, activation="gelu"), torch.bfloat16, 1,
                                 tile, batched=False, cluster_k=cluster_k), "sm_90a")
    values = tile[0] * tile[1] // (2 * tile[0])  # fp32 accumulators per consumer thread
    pushes = cluster_k * (cluster_k - 1) * values // cluster_k // 4  # per rank branch, summed
    assert ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32") == pushes
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
    assert "mbarrier.arrive.release.cluster" in ptx  # the buffer handed back to the peers
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("tile, cluster_m, cluster_n", [((128, 64, 64), 1, 2),
                                                        ((64, 128, 64), 2, 2),
                                                        ((128, 128, 64), 2, 2)])
def test_gemm_2d_cluster_ptx(tile, cluster_m, cluster_n):
    """A cluster along N multicasts A: one multicast TMA load per operand shared (A along N,
    B along M), each from this CTA's share of the tile; a stage's release reaches the
    cluster's CTAs by remote mbarrier arrives; nothing spills."""
    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops.gemm import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("hopper", torch.bfloat16, torch.bfloat16, "k", "k",
                                 Epilogue(bias=True), torch.bfloat16, cluster_m, tile,
                                 batched=False, cluster_n=cluster_n), "sm_90a")
    import re

    loads = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global\S*", ptx)
    assert sum("multicast::cluster" in op for op in loads) == (cluster_m > 1) + (cluster_n > 1)
    assert len(loads) == 2
    assert "mbarrier.arrive" in ptx and "mapa" in ptx  # releases to the peers' barriers
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("head_dim, causal, split_kv", [(128, False, True), (128, True, False),
                                                        (64, False, False)])
def test_short_query_attention_ptx(head_dim, causal, split_kv):
    """At most 64 query rows (decoding): the Hopper kernel's 64-row tile, one consumer
    warpgroup that keeps the launch's registers (no setmaxnreg) and spills nothing."""
    import torch

    from cute_kernels.ops.attention import make_build
    from cute_kernels.runtime.compile import compile_ptx

    build = make_build("hopper", torch.bfloat16, head_dim, causal, split_kv=split_kv,
                       short_query=True)
    assert build.fn.block_m == 64 and build.fn.threads == 256
    ptx = compile_ptx(build, "sm_90a")
    assert "wgmma.mma_async" in ptx and "setmaxnreg" not in ptx
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("buffers", [1, 2])
def test_scatter_add_bulk_buffers_ptx(buffers):
    """``scatter_add``'s bulk path on sm_90a with one transposed-tile buffer (a launch of one
    CTA per tile) or two (persistent CTAs): bulk reductions either way; before refilling a
    buffer, a CTA waits until the reductions of ``buffers`` tiles ago have read it."""
    import torch

    from cute_kernels.ops.column_sparse_mlp import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("scatter", (torch.bfloat16, 128, True, True, True, "bulk",
                                             buffers, False)), "sm_90a")
    assert instruction_mix(ptx)["cp.reduce.async.bulk"] > 0
    assert f"cp.async.bulk.wait_group.read \t{buffers - 1};" in ptx
    _assert_no_spills(ptx, "sm_90a")


def test_scatter_add_m_major_source_ptx():
    """``scatter_add`` from an M-major source on sm_90a: each listed column in by one bulk
    copy completing an mbarrier's transaction count, out by one bulk reduction; no source
    loads through registers, no spills."""
    import torch

    from cute_kernels.ops.column_sparse_mlp import make_build
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build("scatter", (torch.bfloat16, 128, True, True, False, "bulk", 1,
                                             True)), "sm_90a")
    assert ptx.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 1
    assert instruction_mix(ptx)["cp.reduce.async.bulk"] == 1
    assert "mbarrier.arrive.expect_tx" in ptx
    assert "ld.global.v4" not in ptx and "ld.global.b16" not in ptx
    _assert_no_spills(ptx, "sm_90a")


@pytest.mark.parametrize("activation", ["gelu_tanh", "swiglu"])
@pytest.mark.parametrize("epilogue_wg", [False, True], ids=["consumers", "epilogue-warpgroup"])
def test_mlp_delta_up_sm90_ptx(activation, epilogue_wg):
    """The Hopper mm1 (plain and gated): WGMMA fed by the gather producer; with the epilogue
    warpgroup (the default) 512 threads in three register budgets (producer, consumers,
    epilogue), the staged tile (16-bit by default) handed over by mbarriers, not named-barrier
    arrives; its stages (``GATED_NARROW_STAGES`` gated) within the 227 KiB a CTA may take; no
    spills."""
    import torch

    from cute_kernels.kernels.mlp_delta_sm90 import (
        EPILOGUE_WG_REGS,
        GATED_NARROW_STAGES,
        NARROW_EPILOGUE_WG_REGS,
        NARROW_STAGES,
        STAGES,
    )
    from cute_kernels.ops.column_sparse_mlp import SM90_NARROW_STAGING, make_build
    from cute_kernels.runtime.compile import compile_ptx

    build = make_build("up_sm90", (torch.bfloat16, activation, True, True, True, epilogue_wg,
                                   SM90_NARROW_STAGING, 0))
    threads = 512 if epilogue_wg else 384
    ptx = compile_ptx(build, "sm_90a")
    assert f".reqntid {threads}, 1, 1" in ptx
    assert "wgmma.mma_async" in ptx
    regs = [int(line.split()[-1].rstrip(";")) for line in ptx.splitlines()
            if "setmaxnreg" in line]
    if epilogue_wg:
        budgets = NARROW_EPILOGUE_WG_REGS if SM90_NARROW_STAGING else EPILOGUE_WG_REGS
        producer, consumer, epilogue = budgets
        assert sorted(regs) == sorted(budgets)
        assert 128 * (producer + 2 * consumer + epilogue) <= 65536  # two consumer warpgroups
    else:
        assert len(regs) == 2
    assert "bar.arrive" not in ptx and "barrier.arrive" not in ptx.replace("mbarrier.arrive", "")
    # five stages beside the 16-bit tile; the gated form's half-width one has its own constant
    gated = activation == "swiglu"
    assert build.fn.stages == ((GATED_NARROW_STAGES if gated else NARROW_STAGES)
                               if SM90_NARROW_STAGING else STAGES)
    assert build.fn.storage_cls.size_in_bytes() <= 227 * 1024
    # the consumers' form (the A/B baseline) spills a word under its 168-register launch cap
    _assert_no_spills(ptx, "sm_90a", allowed=0 if epilogue_wg else 16)


@pytest.mark.parametrize("narrow", [False, True], ids=["fp32-tile", "16-bit-tile"])
def test_mlp_delta_down_sm90_ptx(narrow):
    """The Hopper mm2 (its list staged in chunks): WGMMA, the delta by TMA, 384 threads in two
    register budgets, the out_cache update in 16-byte vectors, no spills; its epilogue tile
    fp32 with four stages or 16-bit with five (``SM90_NARROW_STAGING``, the default), within
    the 227 KiB of shared memory a CTA may take."""
    import torch

    from cute_kernels.kernels.mlp_delta_sm90 import NARROW_STAGES, STAGES
    from cute_kernels.ops.column_sparse_mlp import SM90_DOWN_CHUNK, make_build
    from cute_kernels.runtime.compile import compile_ptx

    build = make_build("down_sm90", (torch.bfloat16, SM90_DOWN_CHUNK, narrow, 0))
    ptx = compile_ptx(build, "sm_90a")
    assert ".reqntid 384, 1, 1" in ptx and "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx and "ld.global.v4" in ptx and "st.global.v4" in ptx
    assert sum("setmaxnreg" in line for line in ptx.splitlines()) == 2
    assert build.fn.stages == (NARROW_STAGES if narrow else STAGES)
    assert build.fn.storage_cls.size_in_bytes() <= 227 * 1024
    _assert_no_spills(ptx, "sm_90a")


def test_mlp_delta_sm90_refuses_stages_past_shared_memory():
    """An fp32 staging tile leaves no room for a fifth stage: building it fails with a
    ValueError naming the stages and the bytes, not with a launch error on the GPU."""
    import torch

    from cute_kernels.ops.column_sparse_mlp import make_build
    from cute_kernels.runtime.compile import compile_ptx

    with pytest.raises(ValueError, match="5 stages with an fp32 staging tile"):
        compile_ptx(make_build("down_sm90", (torch.bfloat16, 16, False, 5)), "sm_90a")
