"""Bad input is refused with TypeError/ValueError naming the argument, before any compile."""

import pytest
import torch

import cute_kernels as ck
import cute_kernels.ops.bitpack  # noqa: F401  (registers torch.ops.cute_kernels.*_mask)
import cute_kernels.ops.gemm  # noqa: F401  (registers torch.ops.cute_kernels.gemm_nk)
from cute_kernels.runtime import arch
from cute_kernels.runtime.compile import KERNELS
from cute_kernels.runtime.validate import check_aligned


@pytest.fixture(autouse=True)
def no_compiles():
    before = KERNELS.stats["compiles"]
    yield
    assert KERNELS.stats["compiles"] == before, "validation must fail before compiling"


def test_pack_mask_rejects():
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        ck.pack_mask([True, False])
    with pytest.raises(TypeError, match="mask must have dtype bool"):
        ck.pack_mask(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="mask must have at least 1 dimension"):
        ck.pack_mask(torch.tensor(True))
    with pytest.raises(ValueError, match="mask must be on a CUDA device"):
        ck.pack_mask(torch.ones(3, 16, dtype=torch.bool))


def test_unpack_mask_rejects():
    packed = torch.zeros(4, 2, dtype=torch.uint8)
    with pytest.raises(TypeError, match="packed must have dtype uint8"):
        ck.unpack_mask(packed.to(torch.int32), 16)
    with pytest.raises(TypeError, match="n must be an int"):
        ck.unpack_mask(packed, 16.0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        ck.unpack_mask(packed, -1)
    with pytest.raises(ValueError, match=r"packed.shape\[-1\] must be ceil\(n / 8\) = 3"):
        ck.unpack_mask(packed, 17)
    with pytest.raises(ValueError, match="packed must be on a CUDA device"):
        ck.unpack_mask(packed, 16)


def test_meta_shapes_for_torch_compile():
    m = torch.empty(2, 3, 17, dtype=torch.bool, device="meta")
    assert torch.ops.cute_kernels.pack_mask(m).shape == (2, 3, 3)
    p = torch.empty(5, 3, dtype=torch.uint8, device="meta")
    out = torch.ops.cute_kernels.unpack_mask(p, 20)
    assert out.shape == (5, 20) and out.dtype == torch.bool


def test_gemm_meta_shape_for_torch_compile():
    a = torch.empty(5, 64, dtype=torch.bfloat16, device="meta")
    b = torch.empty(48, 64, dtype=torch.bfloat16, device="meta")
    out = torch.ops.cute_kernels.gemm_nk(a, b, None, torch.float32, "silu")
    assert out.shape == (5, 48) and out.dtype == torch.float32


def test_alignment_rules():
    t = torch.zeros(64, dtype=torch.uint8)
    check_aligned("a", t.view(4, 16))
    with pytest.raises(ValueError, match="a must start on a 16-byte boundary"):
        check_aligned("a", t[1:])
    with pytest.raises(ValueError, match=r"a.stride\(0\) = 12 elements = 12 bytes"):
        check_aligned("a", t[:60].view(5, 12))


def test_arch_dispatch():
    assert arch.target_for_capability(9, 0) == "sm_90a"
    assert arch.target_for_capability(8, 6) == "sm_86"
    assert arch.select_path(9, 0) == "hopper"
    assert arch.select_path(8, 0) == "ampere"
    for cc in [(7, 5), (10, 0), (12, 0)]:
        with pytest.raises(arch.UnsupportedGPUError, match="not supported"):
            arch.select_path(*cc)
    with ck.force_path("ampere"):
        assert arch.select_path(9, 0) == "ampere"
        with ck.force_path(None):
            assert arch.select_path(9, 0) == "hopper"
    with ck.force_path("hopper"), pytest.raises(arch.UnsupportedGPUError, match="needs an sm_90"):
        arch.select_path(8, 0)
    with pytest.raises(ValueError, match="path must be one of"):
        with ck.force_path("volta"):
            pass


def test_arch_env_override(monkeypatch):
    monkeypatch.setenv("CUTE_KERNELS_PATH", "ampere")
    arch.reset_env_path()
    assert arch.select_path(9, 0) == "ampere"
    monkeypatch.setenv("CUTE_KERNELS_PATH", "turing")
    arch.reset_env_path()
    with pytest.raises(ValueError, match="CUTE_KERNELS_PATH must be"):
        arch.select_path(9, 0)
    monkeypatch.delenv("CUTE_KERNELS_PATH")
    arch.reset_env_path()
    assert arch.select_path(9, 0) == "hopper"


def test_gemm_rejects():
    bf = torch.bfloat16
    a, b = torch.zeros(64, 64, dtype=bf), torch.zeros(64, 64, dtype=bf)
    with pytest.raises(TypeError, match="a must have dtype bfloat16 or float16, got torch.float3"):
        ck.gemm(a.float(), b)
    with pytest.raises(TypeError, match="same dtype"):
        ck.gemm(a, b.half())
    with pytest.raises(ValueError, match="N and K must be multiples of 8"):
        ck.gemm(torch.zeros(64, 60, dtype=bf), torch.zeros(60, 64, dtype=bf))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        ck.gemm(a, torch.zeros(72, 64, dtype=bf))
    with pytest.raises(ValueError, match="batch dims differ"):
        ck.gemm(torch.zeros(2, 64, 64, dtype=bf), torch.zeros(3, 64, 64, dtype=bf))
    with pytest.raises(ValueError, match="unit stride in one of its last two"):
        ck.gemm(torch.zeros(64, 128, dtype=bf)[:, ::2], b)
    with pytest.raises(ValueError, match=r"bias must have shape \(64,\)"):
        ck.gemm(a, b, bias=torch.zeros(32, dtype=bf))
    with pytest.raises(TypeError, match="out_dtype must be bfloat16, float16 or float32, got"):
        ck.gemm(a, b, out_dtype=torch.int8)
    with pytest.raises(ValueError, match="epilogue must be one of"):
        ck.gemm(a, b, epilogue="tanh")
    with pytest.raises(ValueError, match="a must be on a CUDA device"):
        ck.gemm(a, b)
    with pytest.raises(ValueError, match=r"out must have shape \(2, 3, 64\)"):
        ck.linear(torch.zeros(2, 3, 64, dtype=bf), b, out=torch.zeros(6, 64, dtype=bf))
    with pytest.raises(ValueError, match="w must be 2-D"):
        ck.linear(a, torch.zeros(2, 64, 64, dtype=bf))
    with pytest.raises(ValueError, match=r"out.stride\(0\) must be a multiple of 8 elements"):
        ck.gemm(a, b, out=torch.zeros(64, 68, dtype=torch.float32)[:, :64])


def test_dtype_lists_read_as_english():
    """One allowed dtype is named alone, two are joined by "or", three read "a, b or c"."""
    from cute_kernels.runtime.validate import check_tensor, dtype_names

    assert dtype_names([torch.bool]) == "bool"
    assert dtype_names([torch.bfloat16, torch.float16]) == "bfloat16 or float16"
    assert dtype_names([torch.bfloat16, torch.float16, torch.float32]) == \
        "bfloat16, float16 or float32"
    only_halves = r"^x must have dtype bfloat16 or float16, got torch\.int8$"
    with pytest.raises(TypeError, match=only_halves):
        check_tensor("x", torch.zeros(2, dtype=torch.int8),
                     dtypes=(torch.bfloat16, torch.float16), on_cuda=False)
    with pytest.raises(TypeError, match="w_gate must have dtype bfloat16, float16 or float32, got"):
        ck.pack_gated_weight(torch.zeros(8, 8, dtype=torch.int32),
                             torch.zeros(8, 8, dtype=torch.int32))


def test_plan_caches_start_over_when_full(monkeypatch):
    """``remember_plan`` bounds an op's plan cache: at ``MAX_PLANS`` entries the next plan
    empties it first, so a process making ever new shapes does not grow it forever."""
    from cute_kernels.runtime import validate

    monkeypatch.setattr(validate, "MAX_PLANS", 3)
    cache = {}
    for i in range(3):
        validate.remember_plan(cache, i, f"plan {i}")
    assert cache == {0: "plan 0", 1: "plan 1", 2: "plan 2"}
    validate.remember_plan(cache, 3, "plan 3")
    assert cache == {3: "plan 3"}
