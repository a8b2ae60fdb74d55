"""The interleaved gated-MLP weight layout (up at even rows, gate at odd) and its reference."""

import pytest
import torch

from cute_kernels.ops.gated_mlp import (
    gated_mlp_up_reference,
    pack_gated_weight,
    unpack_gated_weight,
)


def test_interleave_positions_and_roundtrip():
    w_gate, w_up = torch.randn(5, 16), torch.randn(5, 16)
    packed = pack_gated_weight(w_gate, w_up)
    assert packed.shape == (10, 16) and packed.is_contiguous()
    for i in range(5):
        assert torch.equal(packed[2 * i], w_up[i]) and torch.equal(packed[2 * i + 1], w_gate[i])
    g, u = unpack_gated_weight(packed)
    assert torch.equal(g, w_gate) and torch.equal(u, w_up)
    concat = pack_gated_weight(torch.cat([w_gate, w_up]), layout="concat")
    assert torch.equal(concat, packed)


@pytest.mark.parametrize("activation, fn", [
    ("swiglu", torch.nn.functional.silu),
    ("geglu", torch.nn.functional.gelu),
    ("geglu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    ("reglu", torch.relu),
])
def test_reference_is_the_unfused_mlp(activation, fn):
    x, w_gate, w_up = torch.randn(7, 32), torch.randn(12, 32), torch.randn(12, 32)
    out = gated_mlp_up_reference(x, pack_gated_weight(w_gate, w_up), activation)
    torch.testing.assert_close(out, fn(x @ w_gate.t()) * (x @ w_up.t()))
    # the interleaved GEMM puts each output's (up, gate) pair in adjacent columns
    pairs = (x @ pack_gated_weight(w_gate, w_up).t()).view(7, 12, 2)
    torch.testing.assert_close(fn(pairs[..., 1]) * pairs[..., 0], out)


def test_rejects():
    a = torch.randn(4, 8)
    with pytest.raises(ValueError, match="same shape"):
        pack_gated_weight(a, torch.randn(5, 8))
    with pytest.raises(ValueError, match="w_up=None"):
        pack_gated_weight(torch.randn(8, 8), a, layout="concat")
    with pytest.raises(ValueError, match="even number of rows"):
        pack_gated_weight(torch.randn(5, 8), layout="concat")
    with pytest.raises(ValueError, match="layout must be"):
        pack_gated_weight(a, a, layout="interleaved")
    with pytest.raises(TypeError, match="w_up must be a torch.Tensor"):
        pack_gated_weight(a)
    with pytest.raises(ValueError, match="activation must be one of"):
        gated_mlp_up_reference(torch.randn(2, 8), pack_gated_weight(a, a), "swish")
