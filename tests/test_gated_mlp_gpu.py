"""The fused gated up-projection (one GEMM over the interleaved weight, gated in registers)
against the fp32 reference: fresh Kaiming-like inputs, poisoned outputs, both paths."""

import pytest
import torch

import cute_kernels as ck
from cute_kernels.ops.gated_mlp import _gated_mlp_up, gate, gated_mlp_up_reference

pytestmark = pytest.mark.gpu
PATHS = ["hopper", "ampere"] if (torch.cuda.is_available()
                                 and torch.cuda.get_device_capability() == (9, 0)) else ["ampere"]


def kaiming(*shape):
    fan_in = shape[-1]
    return (torch.randn(*shape, device="cuda") * (2.0 / fan_in) ** 0.5).bfloat16()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("activation", ["swiglu", "geglu", "geglu_tanh", "reglu"])
@pytest.mark.parametrize("m, inter, k", [(256, 512, 256), (1000, 1032, 512), (7, 136, 64)])
def test_gated_matches_reference(path, activation, m, inter, k):
    x = torch.randn(m, k, device="cuda").bfloat16()
    w_packed = ck.pack_gated_weight(kaiming(inter, k), kaiming(inter, k))
    out = torch.full((m, inter), float("nan"), dtype=torch.bfloat16, device="cuda")
    with ck.force_path(path):
        _gated_mlp_up(x, w_packed, activation, out=out)
    ref = gated_mlp_up_reference(x, w_packed, activation)
    pairs = (x @ w_packed.t()).view(m, inter, 2)  # torch's own bf16 unfused path
    unfused = gate(pairs[..., 0].float(), pairs[..., 1].float(), activation).bfloat16()
    assert not torch.isnan(out).any(), "unwritten outputs"
    err = ((out.float() - ref).norm() / ref.norm()).item()
    base = ((unfused.float() - ref).norm() / ref.norm()).item()
    assert err <= 2 * base + 1e-6, f"{path} {activation}: {err:.2e} vs unfused {base:.2e}"
