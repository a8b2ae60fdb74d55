"""The interleaved gated-MLP weight layout (up at even rows, gate at odd) and its reference."""

import pytest
import torch

from cute_kernels import reference
from cute_kernels.ops.gated_mlp import pack_gated_weight, unpack_gated_weight


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
    out = reference.gated_mlp_up(x, pack_gated_weight(w_gate, w_up), activation=activation)
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
        pack_gated_weight(a, [[0.0] * 8] * 4)
    with pytest.raises(ValueError, match="activation must be one of"):
        reference.gated_mlp_up(torch.randn(2, 8), pack_gated_weight(a, a), activation="swish")


@pytest.mark.parametrize("shape", [(8, 16), (8,)])
def test_one_tensor_without_layout_points_at_concat(shape):
    """A fused [gate; up] weight (or bias) passed alone must say how to pass it."""
    fused = torch.randn(*shape)
    with pytest.raises(TypeError, match=r'one tensor .*no w_up.*layout="concat".*'
                                        r"pack_gated_weight\(w_gate, w_up\)"):
        pack_gated_weight(fused)
    packed = pack_gated_weight(fused, layout="concat")  # what the message asks for works
    w_gate, w_up = unpack_gated_weight(packed)
    assert torch.equal(w_gate, fused[:4]) and torch.equal(w_up, fused[4:])


def test_bias_packs_like_weights():
    b_gate, b_up = torch.randn(6), torch.randn(6)
    packed = pack_gated_weight(b_gate, b_up)
    assert packed.shape == (12,)
    assert torch.equal(packed[0::2], b_up) and torch.equal(packed[1::2], b_gate)


def test_gated_mlp_up_rejects_before_launch():
    import cute_kernels as ck

    x = torch.randn(4, 64).bfloat16()
    w = torch.randn(128, 64).bfloat16()
    with pytest.raises(ValueError, match="activation must be one of"):
        ck.gated_mlp_up(x, w, activation="swish")
    with pytest.raises(TypeError, match="x must have dtype"):
        ck.gated_mlp_up(x.float(), w)
    with pytest.raises(ValueError, match="I a multiple of 8"):
        ck.gated_mlp_up(x, w[:120])
    with pytest.raises(ValueError, match="K = 64 features but w_packed has K = 32"):
        ck.gated_mlp_up(x, w[:, :32])
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        ck.gated_mlp_up(x, w)


def test_gated_meta_shape_for_torch_compile():
    import cute_kernels.ops.gated_mlp  # noqa: F401  (registers the custom op)

    x = torch.empty(2, 5, 64, dtype=torch.bfloat16, device="meta")
    w = torch.empty(96, 64, dtype=torch.bfloat16, device="meta")
    out = torch.ops.cute_kernels.gated_mlp_up(x, w, None, "swiglu")
    assert out.shape == (2, 5, 48) and out.dtype == torch.bfloat16


def test_gated_mlp_module_rules_and_llama_conversion():
    from torch import nn

    import cute_kernels as ck

    with pytest.raises(ValueError, match="intermediate must be a positive multiple of 8"):
        ck.GatedMLP(64, 100)
    with pytest.raises(TypeError, match="dtype must be bfloat16 or float16"):
        ck.GatedMLP(64, 128, dtype=torch.float32)
    with pytest.raises(ValueError, match="activation must be one of"):
        ck.GatedMLP(64, 128, activation="silu")

    class Config:
        hidden_act = "gelu_pytorch_tanh"

    mlp = nn.Module()
    mlp.gate_proj, mlp.up_proj = nn.Linear(64, 128, bias=False), nn.Linear(64, 128, bias=False)
    mlp.down_proj, mlp.config = nn.Linear(128, 64, bias=False), Config()
    mlp = mlp.bfloat16()
    ours = ck.GatedMLP.from_llama(mlp)
    assert ours.activation == "geglu_tanh" and ours.b_packed is None
    w_gate, w_up = ours.gate_up_weights
    assert torch.equal(w_gate, mlp.gate_proj.weight) and torch.equal(w_up, mlp.up_proj.weight)
    assert torch.equal(ours.w_down, mlp.down_proj.weight)
    del mlp.config
    mlp.act_fn = nn.Tanh()
    with pytest.raises(ValueError, match="cannot tell the gated activation"):
        ck.GatedMLP.from_llama(mlp)
    assert ck.GatedMLP.from_llama(mlp, activation="reglu").activation == "reglu"
    mlp.up_proj = None
    with pytest.raises(TypeError, match="mlp.up_proj must be an nn.Linear"):
        ck.GatedMLP.from_llama(mlp)


def _llama_mlp(dtype, bias=False):
    from torch import nn

    class Config:
        hidden_act = "silu"

    mlp = nn.Module()
    mlp.gate_proj, mlp.up_proj = nn.Linear(64, 128, bias=bias), nn.Linear(64, 128, bias=bias)
    mlp.down_proj, mlp.config = nn.Linear(128, 64, bias=bias), Config()
    return mlp.to(dtype)


def test_from_llama_on_float32_says_to_pass_dtype():
    """Hugging Face models load as float32 by default: the error names the fix."""
    import cute_kernels as ck

    mlp = _llama_mlp(torch.float32)
    with pytest.raises(TypeError, match=r"torch\.float32 weights.*dtype=torch\.bfloat16"):
        ck.GatedMLP.from_llama(mlp)
    with pytest.raises(TypeError, match="dtype must be torch.bfloat16 or torch.float16"):
        ck.GatedMLP.from_llama(mlp, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_from_llama_dtype_converts(dtype, bias):
    import cute_kernels as ck

    mlp = _llama_mlp(torch.float32, bias=bias)
    ours = ck.GatedMLP.from_llama(mlp, dtype=dtype)
    assert ours.w_packed.dtype == ours.w_down.dtype == dtype and ours.activation == "swiglu"
    w_gate, w_up = ours.gate_up_weights
    assert torch.equal(w_gate, mlp.gate_proj.weight.to(dtype))
    assert torch.equal(w_up, mlp.up_proj.weight.to(dtype))
    assert torch.equal(ours.w_down, mlp.down_proj.weight.to(dtype))
    assert mlp.gate_proj.weight.dtype == torch.float32  # the source module is left alone
    if bias:
        b_gate, b_up = unpack_gated_weight(ours.b_packed)
        assert torch.equal(b_gate, mlp.gate_proj.bias.to(dtype))
        assert torch.equal(b_up, mlp.up_proj.bias.to(dtype))
        assert torch.equal(ours.b_down, mlp.down_proj.bias.to(dtype))


def test_from_llama_keeps_a_half_module_dtype():
    import cute_kernels as ck

    assert ck.GatedMLP.from_llama(_llama_mlp(torch.float16)).w_packed.dtype == torch.float16
    assert ck.GatedMLP.from_llama(_llama_mlp(torch.bfloat16)).w_down.dtype == torch.bfloat16
