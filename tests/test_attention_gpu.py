"""Flash attention forward on the GPU against the fp32 reference (issue 5, work in progress),
both paths."""

import pytest
import torch

import cute_kernels as ck
from cute_kernels.ops.attention import _attention, attention_reference, torch_attention

pytestmark = pytest.mark.gpu
PATHS = ["hopper", "ampere"] if (torch.cuda.is_available()
                                 and torch.cuda.get_device_capability() == (9, 0)) else ["ampere"]
# (path, Hopper softmax/MMA overlap)
VARIANTS = [(p, False) for p in PATHS] + ([("hopper", True)] if "hopper" in PATHS else [])


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("path, overlap", VARIANTS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s_q, s_kv, h, h_kv", [(1, 1, 2, 2), (17, 17, 4, 2), (1000, 1000, 2, 1),
                                                (128, 4097, 2, 2), (300, 77, 2, 2)])
def test_matches_reference(path, overlap, d, causal, s_q, s_kv, h, h_kv):
    b = 2
    q = torch.randn(b, s_q, h, d, device="cuda").bfloat16().transpose(1, 2)  # strided view
    k = torch.randn(b, h_kv, s_kv, d, device="cuda").bfloat16()
    v = torch.randn(b, h_kv, s_kv, d, device="cuda").bfloat16()
    with ck.force_path(path):
        poisoned = torch.full((b, h, s_q, d), float("nan"), device="cuda").bfloat16()
        o, lse = _attention(q, k, v, causal=causal, out=poisoned, overlap=overlap)
    ref_o, ref_lse = attention_reference(q, k, v, causal=causal)
    visible = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), visible)
    torch.testing.assert_close(lse[visible], ref_lse[visible], rtol=0, atol=1e-3)
    assert not torch.isnan(o).any()
    torch_o = torch_attention(q, k, v, causal=causal)  # torch's bf16, same conventions
    assert rel_err(o, ref_o) <= 2 * rel_err(torch_o, ref_o) + 1e-6


@pytest.mark.parametrize("path, overlap", VARIANTS)
def test_very_negative_logits_stay_finite(path, overlap):
    """Causal rows whose first key block is fully masked, then all logits near -96: the
    online rescale must not turn 0 * inf into NaN."""
    q = torch.ones(1, 2, 256, 64, device="cuda").bfloat16()
    k = torch.full((1, 2, 256, 64), -12.0, device="cuda").bfloat16()
    v = torch.randn(1, 2, 256, 64, device="cuda").bfloat16()
    with ck.force_path(path):
        o, lse = _attention(q, k, v, causal=True, overlap=overlap)
    ref_o, ref_lse = attention_reference(q, k, v, causal=True)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-3)
    assert rel_err(o, ref_o) < 1e-2



@pytest.mark.skipif("hopper" not in PATHS, reason="the column-sum kernel is Hopper-only so far")
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("s_q, s_kv", [(192, 64), (1000, 777), (17, 4097)])
def test_colsum_matches_reference(d, s_q, s_kv):
    from cute_kernels.ops.attention import _attention_colsum, attention_colsum_reference

    q = torch.randn(2, 3, s_q, d, device="cuda").bfloat16()
    k = torch.randn(2, 3, s_kv, d, device="cuda").bfloat16()
    v = torch.randn(2, 3, s_kv, d, device="cuda").bfloat16()
    # the previous step's normalisers: this step's lse, perturbed (so p_prev != p)
    _, lse0 = attention_reference(q, k, v)
    prev = (lse0 + 0.1 * torch.randn_like(lse0)).contiguous()
    o, lse, colsum = _attention_colsum(q, k, v, prev)
    ref_o, ref_lse, ref_colsum = attention_colsum_reference(q, k, v, prev)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-3)
    assert rel_err(o, ref_o) < 1e-2
    assert colsum.shape == ref_colsum.shape
    assert ((colsum - ref_colsum).abs() / ref_colsum.abs().clamp_min(1e-6)).max() < 1e-2
