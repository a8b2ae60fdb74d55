"""The Hopper column-sparse (gather) attention kernel compiles without a GPU, with the
instructions it is built around: K/V rows by 16-byte cp.async completing on mbarriers
(no TMA for K/V), Q and O by TMA, WGMMA, setmaxnreg; no local memory, no spills."""

import re

import pytest
from test_ptx import _assert_no_spills


def _gather_build(head_dim, group, accumulate=False, **extra):
    import cutlass
    import torch

    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.runtime.bridge import fake_bhsd, fake_compact
    from cute_kernels.runtime.compile import Build
    from cute_kernels.runtime.launch import launch_args
    from cute_kernels.tuning.attention import hopper_gather_config

    def bhsd():
        return fake_bhsd(torch.bfloat16, head_dim)

    kernel = AttentionSm90(head_dim, False, **hopper_gather_config(head_dim, group),
                           accumulate=accumulate, **extra)
    return kernel, Build(kernel, launch_args(
        kernel, mQ=bhsd(), mK=bhsd(), mV=bhsd(), mO=bhsd(), mLSE=fake_compact(torch.float32, 3),
        mPrevLSE=None, mColsum=None, mIndices=fake_compact(torch.int32, 4),
        mCounts=fake_compact(torch.int32, 3), scale=cutlass.Float32(1.0),
        out_scale=cutlass.Float32(1.0) if accumulate else None))


@pytest.mark.parametrize("addresses", [True, False])
@pytest.mark.parametrize("head_dim, group", [(64, 128), (64, 192), (128, 128), (128, 192)])
def test_gather_kernel_ptx(head_dim, group, addresses):
    from cute_kernels.registry import instruction_mix
    from cute_kernels.runtime.compile import compile_ptx

    kernel, build = _gather_build(head_dim, group, gather_addresses=addresses)
    ptx = compile_ptx(build, "sm_90a")
    mix = instruction_mix(ptx)
    assert mix["wgmma"] > 0 and mix["setmaxnreg"] == 2
    loader = kernel.kv_loader
    if addresses:
        # staged row addresses (the default): per pass of 16 rows one shared 64-bit address
        # load and one cp.async per 64-column half, fully unrolled, for K and for V; the
        # second half's copy rides on immediate offsets (+128 B global, +BN x 128 B smem)
        passes = kernel.block_n // loader.address_rows
        assert mix["cp.async"] == 2 * passes * loader.halves, mix
        assert ptx.count("ld.shared.b64") == 2 * passes
        assert ptx.count("st.shared.v2.b64") == 1  # a row's K and V addresses, staged once
        if loader.halves == 2:
            assert len(re.findall(r"cp\.async\.cg\.shared\.global \[%r\d+\+\d+\], "
                                  r"\[%rd\d+\+128\]", ptx)) == 2 * passes
    else:
        # one cp.async per pass of the (unrolled x2) row loop, for K and for V
        assert mix["cp.async"] == 2 * min(2, loader.passes), mix
    # each producer thread's copies complete on the stage's full barrier
    assert ptx.count("cp.async.mbarrier.arrive.noinc") == 2
    # Q in and O out by TMA only (no K/V descriptors): as many tensor loads as stores
    loads = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global", ptx)
    stores = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx)
    assert loads and len(loads) == len(stores), (loads, stores)
    # D = 128, group 192: the 192 x 128 tile spills (ptxas 13.0: 184 bytes with staged
    # addresses, 252 without) and still measured 0.85x our dense kernel against 0.72x for the
    # spill-free 192 x 64 tile (tuning/attention)
    spilling = (head_dim, group) == (128, 192)
    if not spilling:
        assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, "sm_90a", allowed=320 if spilling else 0)


def test_gather_config_rules():
    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.tuning.attention import hopper_gather_config

    with pytest.raises(ValueError, match="group 128 or 192"):
        hopper_gather_config(128, 64)
    with pytest.raises(ValueError, match="block_m to divide group"):
        AttentionSm90(128, False, block_m=128, gather=True, group=192)
    with pytest.raises(ValueError, match="at two CTAs per SM, to the gather variant"):
        AttentionSm90(128, False, block_m=64, gather=True, group=128)  # one CTA per SM
    assert hopper_gather_config(128, 128, short=True)["ctas_per_sm"] == 2
    assert "ctas_per_sm" not in hopper_gather_config(128, 192, short=True)  # measured: 128
    with pytest.raises(ValueError, match="neither causal"):
        AttentionSm90(128, True, gather=True, group=128)


def test_tma_block_loads_rules():
    """``gather_tma``: lists of key blocks that are whole 8-row swizzle atoms dividing the key
    tile; the config takes it exactly there."""
    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.tuning.attention import hopper_gather_config

    with pytest.raises(ValueError, match="gather_tma applies to the gather variant"):
        AttentionSm90(128, False, gather=True, group=128, gather_tma=True)
    with pytest.raises(ValueError, match="gather_tma applies to the gather variant"):
        AttentionSm90(128, False, gather_tma=True)
    with pytest.raises(ValueError, match="entry_keys a multiple of 8"):
        AttentionSm90(128, False, gather=True, group=128, gather_tma=True, gather_entry_keys=4)
    with pytest.raises(ValueError, match="dividing block_n"):
        AttentionSm90(128, False, block_m=64, block_n=64, gather=True, group=128,
                      ctas_per_sm=2, overlap=True, gather_tma=True, gather_entry_keys=128)
    for keys, short, want in [(1, True, False), (4, False, False), (16, True, True),
                              (32, False, True), (64, True, True), (128, True, False),
                              (128, False, True)]:
        cfg = hopper_gather_config(128, 128, short=short, entry_keys=keys)
        assert cfg.get("gather_tma", False) is want, (keys, short)


def test_accumulate_stores_by_tma_reduce_add():
    """accumulate=True: O (times out_scale) leaves by a TMA reduce-add, not a plain store."""
    from cute_kernels.runtime.compile import compile_ptx

    _, build = _gather_build(128, 128, accumulate=True)
    ptx = compile_ptx(build, "sm_90a")
    assert re.search(r"cp\.reduce\.async\.bulk\.tensor\.\dd\.global\.shared::cta\.add", ptx)
    assert not re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx)
    _, plain = _gather_build(128, 128)
    assert "cp.reduce.async.bulk" not in compile_ptx(plain, "sm_90a")


@pytest.mark.parametrize("config", [
    dict(gather=True, group=128, block_m=128, block_n=128, stages=2),
    dict(gather=True, group=192, block_m=192, block_n=64, stages=5),
    dict(gather=True, group=192, block_m=192, block_n=64, stages=5, gather_addresses=False),
    dict(overlap=True),
    dict(colsum=True, overlap=True, group=192, colsum_stages=8, colsum_writers=2),
    dict(colsum=True, block_m=192, colsum_method="mma_sync"),
])
def test_smem_estimate_covers_the_shared_storage(config):
    """``smem_bytes`` (what the constructor checks against the 227 KiB an sm_90 CTA may have)
    is at least the SharedStorage the kernel allocates: an underestimate let a gather config
    pass the check and fail at launch (cudaErrorInvalidValue)."""
    import torch

    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.ops.column_sparse import make_build
    from cute_kernels.runtime.compile import compile_ptx

    d = 64 if config.get("colsum_method") == "mma_sync" else 128
    kernel = AttentionSm90(d, False, **config)
    if config.get("gather"):
        build = make_build("hopper", torch.bfloat16, d, config["group"], False, config=config)
    else:
        from cute_kernels.ops.attention import make_build as dense_build

        build = dense_build("hopper", torch.bfloat16, d, False,
                            colsum=config.get("colsum", False), group=config.get("group", 192),
                            config=config)
    compile_ptx(build, "sm_90a")
    allocated = build.fn.storage_cls.size_in_bytes()
    assert allocated <= kernel.smem_bytes() <= allocated + 2048, (allocated, kernel.smem_bytes())


def test_gather_config_over_the_smem_limit_is_refused():
    from cute_kernels.kernels.attention.sm90 import AttentionSm90

    with pytest.raises(ValueError, match="shared memory"):
        AttentionSm90(128, False, gather=True, group=128, block_m=128, block_n=128, stages=3)
