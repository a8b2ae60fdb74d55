"""The Hopper column-sparse (gather) attention kernel compiles without a GPU, with the
instructions it is built around: K/V rows by 16-byte cp.async completing on mbarriers
(no TMA for K/V), Q and O by TMA, WGMMA, setmaxnreg; no local memory, no spills."""

import re

import pytest
from test_ptx import _assert_no_spills


def _gather_build(head_dim, group, accumulate=False):
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
                           accumulate=accumulate)
    return kernel, Build(kernel, launch_args(
        kernel, mQ=bhsd(), mK=bhsd(), mV=bhsd(), mO=bhsd(), mLSE=fake_compact(torch.float32, 3),
        mPrevLSE=None, mColsum=None, mIndices=fake_compact(torch.int32, 4),
        mCounts=fake_compact(torch.int32, 3), scale=cutlass.Float32(1.0),
        out_scale=cutlass.Float32(1.0) if accumulate else None))


@pytest.mark.parametrize("head_dim, group", [(64, 128), (64, 192), (128, 128), (128, 192)])
def test_gather_kernel_ptx(head_dim, group):
    from cute_kernels.registry import instruction_mix
    from cute_kernels.runtime.compile import compile_ptx

    kernel, build = _gather_build(head_dim, group)
    ptx = compile_ptx(build, "sm_90a")
    mix = instruction_mix(ptx)
    assert mix["wgmma"] > 0 and mix["setmaxnreg"] == 2
    # one cp.async per pass of the (unrolled x2) row loop, for K and for V; each producer
    # thread's copies complete on the stage's full barrier
    loader = kernel.kv_loader
    assert mix["cp.async"] == 2 * min(2, loader.passes), mix
    assert ptx.count("cp.async.mbarrier.arrive.noinc") == 2
    # Q in and O out by TMA only (no K/V descriptors): as many tensor loads as stores
    loads = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global", ptx)
    stores = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx)
    assert loads and len(loads) == len(stores), (loads, stores)
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, "sm_90a")


def test_gather_config_rules():
    from cute_kernels.kernels.attention.sm90 import AttentionSm90
    from cute_kernels.tuning.attention import hopper_gather_config

    with pytest.raises(ValueError, match="group 128 or 192"):
        hopper_gather_config(128, 64)
    with pytest.raises(ValueError, match="block_m == group"):
        AttentionSm90(128, False, block_m=128, gather=True, group=192)
    with pytest.raises(ValueError, match="neither causal"):
        AttentionSm90(128, True, gather=True, group=128)


def test_accumulate_stores_by_tma_reduce_add():
    """accumulate=True: O (times out_scale) leaves by a TMA reduce-add, not a plain store."""
    from cute_kernels.runtime.compile import compile_ptx

    _, build = _gather_build(128, 128, accumulate=True)
    ptx = compile_ptx(build, "sm_90a")
    assert re.search(r"cp\.reduce\.async\.bulk\.tensor\.\dd\.global\.shared::cta\.add", ptx)
    assert not re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx)
    _, plain = _gather_build(128, 128)
    assert "cp.reduce.async.bulk" not in compile_ptx(plain, "sm_90a")
