"""The public float32 references (``cute_kernels.reference``, the GPU tests' oracle) on the CPU:
bitpack against numpy's packbits, the GEMMs against torch, and one per op."""

import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cute_kernels as ck
from cute_kernels import reference


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 17), (2, 3, 64), (2, 2, 2, 9)])
def test_reference_matches_numpy(shape):
    g = torch.Generator().manual_seed(hash(shape) % 2**31)
    mask = torch.rand(shape, generator=g) < 0.5
    packed = reference.pack_mask(mask)
    expect = np.packbits(mask.numpy(), axis=-1, bitorder="little")
    assert np.array_equal(packed.numpy(), expect)
    assert torch.equal(reference.unpack_mask(packed, shape[-1]), mask)


def test_every_op_has_a_reference_of_the_same_name():
    for name in reference.__all__:
        module = reference.NOT_YET_PUBLIC.get(name)
        op = getattr(importlib.import_module(module) if module else ck, name)
        assert callable(op) and callable(getattr(reference, name))
        assert module is None or name not in ck.__all__  # exported: drop it from NOT_YET_PUBLIC
    assert ck.reference is reference  # reachable as an attribute after ``import cute_kernels``


@pytest.mark.parametrize("epilogue, fn", [(None, lambda t: t), ("relu", torch.relu),
                                          ("silu", F.silu), ("gelu", F.gelu),
                                          ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh"))])
def test_gemm_and_linear(epilogue, fn):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 32, generator=g).bfloat16()
    w = torch.randn(24, 32, generator=g).bfloat16()
    bias = torch.randn(24, generator=g).bfloat16()
    expect = fn(F.linear(x.float(), w.float(), bias.float()))
    out = reference.linear(x, w, bias, epilogue=epilogue)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expect)
    torch.testing.assert_close(reference.gemm(x, w.t(), bias=bias, epilogue=epilogue), expect)
    with pytest.raises(ValueError, match="epilogue must be one of"):
        reference.gemm(x, w.t(), epilogue="tanh")


def test_gated_mlp_up_is_the_unfused_mlp():
    x, w_gate, w_up = torch.randn(3, 16), torch.randn(8, 16), torch.randn(8, 16)
    out = reference.gated_mlp_up(x, ck.pack_gated_weight(w_gate, w_up))
    torch.testing.assert_close(out, F.silu(x @ w_gate.t()) * (x @ w_up.t()))


def test_attention_return_convention_follows_the_op():
    q = torch.randn(1, 2, 5, 64).bfloat16()
    o = reference.attention(q, q, q)
    o2, lse = reference.attention(q, q, q, return_lse=True)
    assert o.dtype == lse.dtype == torch.float32 and lse.shape == (1, 2, 5)
    torch.testing.assert_close(o, o2)
    with pytest.raises(TypeError, match="causal must be a bool"):
        reference.attention(q, q, q, causal=1)


def test_bitpack_references_refuse_bad_arguments():
    with pytest.raises(TypeError, match="mask must be a bool"):
        reference.pack_mask(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="ceil"):
        reference.unpack_mask(torch.zeros(2, dtype=torch.uint8), 17)


def test_device_error_points_at_the_references():
    with pytest.raises(ValueError, match=r"CUDA device.*cute_kernels\.reference"):
        ck.pack_mask(torch.ones(3, 16, dtype=torch.bool))
