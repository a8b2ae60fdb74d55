"""The fused gated up-projection (one GEMM over the interleaved weight, gated in registers)
and GatedMLP against fp32 references: fresh Kaiming-like inputs, poisoned outputs, both
paths, every activation, autograd against torch's gradients."""

import pytest
import torch
from torch import nn

import cute_kernels as ck
from cute_kernels.ops.activations import gate
from cute_kernels.ops.gated_mlp import gated_mlp_up_reference

pytestmark = pytest.mark.gpu
PATHS = ["hopper", "ampere"] if (torch.cuda.is_available()
                                 and torch.cuda.get_device_capability() == (9, 0)) else ["ampere"]
ACTS = ["swiglu", "geglu", "geglu_tanh", "reglu"]


def kaiming(*shape, dtype=torch.bfloat16):
    return (torch.randn(*shape, device="cuda") * (2.0 / shape[-1]) ** 0.5).to(dtype)


def rel_err(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def unfused_torch(x, w_packed, activation, bias=None):
    """torch's own half-precision unfused path: full-width GEMM, then the gate."""
    pre = torch.nn.functional.linear(x, w_packed, bias)
    return gate(pre[..., 0::2].float(), pre[..., 1::2].float(), activation).to(x.dtype)


def check_against_reference(out, x, w_packed, activation, bias=None):
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    ref = gated_mlp_up_reference(x, w_packed, activation, bias)
    err = rel_err(out, ref)
    base = rel_err(unfused_torch(x, w_packed, activation, bias), ref)
    assert err <= 2 * base + 1e-6, f"{activation}: {err:.2e} vs unfused torch {base:.2e}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("m, inter, k", [(256, 512, 256), (1000, 1032, 512), (7, 136, 64),
                                         (1, 264, 1024), (333, 4104, 128)])
def test_matches_reference(path, activation, m, inter, k):
    x = torch.randn(m, k, device="cuda").bfloat16()
    w_packed = ck.pack_gated_weight(kaiming(inter, k), kaiming(inter, k))
    out = torch.full((m, inter), float("nan"), dtype=torch.bfloat16, device="cuda")
    with ck.force_path(path):
        ck.gated_mlp_up(x, w_packed, activation=activation, out=out)
    check_against_reference(out, x, w_packed, activation)


@pytest.mark.parametrize("path", PATHS)
def test_bias_fp16_batched_and_strided(path):
    k, inter = 192, 520
    x = torch.randn(3, 77, k, device="cuda").half()
    w = ck.pack_gated_weight(kaiming(inter, k, dtype=torch.half), kaiming(inter, k,
                                                                        dtype=torch.half))
    b = ck.pack_gated_weight(torch.randn(inter, device="cuda").half(),
                             torch.randn(inter, device="cuda").half())
    with ck.force_path(path):
        out = ck.gated_mlp_up(x, w, activation="geglu", bias=b)
        assert out.shape == (3, 77, inter) and out.dtype == torch.half
        check_against_reference(out, x, w, "geglu", b)
        # x column-major (M-major) and w transposed storage reach the kernel without copies
        xt = torch.randn(k, 232, device="cuda").half().t()
        wt = w.t().contiguous().t()
        check_against_reference(ck.gated_mlp_up(xt, wt, activation="swiglu"), xt, wt, "swiglu")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("activation", ["swiglu", "geglu_tanh"])
def test_autograd_matches_torch(path, activation):
    m, inter, k = 300, 264, 128
    x = torch.randn(m, k, device="cuda").bfloat16().requires_grad_()
    w = ck.pack_gated_weight(kaiming(inter, k), kaiming(inter, k)).requires_grad_()
    b = (torch.randn(2 * inter, device="cuda") / 8).bfloat16().requires_grad_()
    grad = torch.randn(m, inter, device="cuda").bfloat16()
    with ck.force_path(path):
        ck.gated_mlp_up(x, w, activation=activation, bias=b).backward(grad)
    ours = [t.grad for t in (x, w, b)]
    # fp32 reference gradients, and torch's own bf16 unfused gradients for the tolerance
    xf, wf, bf = (t.detach().float().requires_grad_() for t in (x, w, b))
    gated_mlp_up_reference(xf, wf, activation, bf).backward(grad.float())
    xh, wh, bh = (t.detach().clone().requires_grad_() for t in (x, w, b))
    pre = torch.nn.functional.linear(xh, wh, bh)
    gate(pre[:, 0::2], pre[:, 1::2], activation).backward(grad)
    for name, g, ref, base in zip("xwb", ours, (xf.grad, wf.grad, bf.grad),
                                  (xh.grad, wh.grad, bh.grad)):
        assert g is not None and g.dtype == torch.bfloat16 and not torch.isnan(g).any(), name
        err, base_err = rel_err(g, ref), rel_err(base, ref)
        assert err <= 2 * base_err + 1e-6, f"d{name}: {err:.2e} vs torch {base_err:.2e}"


class LlamaMLP(nn.Module):
    """The shape of transformers' LlamaMLP (not imported: no transformers dependency)."""

    def __init__(self, hidden, inter, act=nn.SiLU, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        self.act_fn = act()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bias", [False, True])
def test_gated_mlp_from_llama(path, bias):
    torch.manual_seed(0)
    llama = LlamaMLP(256, 688, bias=bias).cuda()
    x = torch.randn(2, 45, 256, device="cuda")
    ref = llama(x).detach()  # fp32 module = the reference
    base = rel_err(llama.bfloat16()(x.bfloat16()), ref)
    ours = ck.GatedMLP.from_llama(llama)
    assert ours.activation == "swiglu" and (ours.b_packed is not None) == bias
    with ck.force_path(path):
        y = ours(x.bfloat16())
        assert y.shape == (2, 45, 256)
        assert rel_err(y, ref) <= 2 * base + 1e-6
        # training: gradients reach every parameter and match torch's bf16 module
        y.float().square().mean().backward()
        llama.zero_grad()
        llama(x.bfloat16()).float().square().mean().backward()
    w_gate_grad, w_up_grad = ck.unpack_gated_weight(ours.w_packed.grad)
    for g, ref_g in ((w_gate_grad, llama.gate_proj.weight.grad),
                     (w_up_grad, llama.up_proj.weight.grad),
                     (ours.w_down.grad, llama.down_proj.weight.grad)):
        assert rel_err(g, ref_g) < 0.05


def test_torch_compile_fullgraph():
    mlp = ck.GatedMLP(128, 256, device="cuda")
    x = torch.randn(33, 128, device="cuda").bfloat16()
    with torch.no_grad():
        eager = mlp(x)
        compiled = torch.compile(mlp, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)


def test_out_with_autograd_is_rejected():
    x = torch.randn(16, 64, device="cuda").bfloat16().requires_grad_()
    w = ck.pack_gated_weight(kaiming(64, 64), kaiming(64, 64))
    with pytest.raises(ValueError, match="out= is not supported"):
        ck.gated_mlp_up(x, w, out=torch.empty(16, 64, device="cuda").bfloat16())


@pytest.mark.skipif("hopper" not in PATHS, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("tile", [(128, 192, 64), (128, 128, 64), (64, 256, 64), (64, 128, 64),
                                  (64, 224, 128), (64, 128, 128)])
def test_every_hopper_tile(monkeypatch, tile):
    import cute_kernels.ops.gated_mlp as gated_ops
    import cute_kernels.tuning.gemm as gemm_tuning

    monkeypatch.setattr(gemm_tuning, "pick_tile", lambda *args: tile)
    monkeypatch.setattr(gated_ops, "_PLANS", {})  # plans made with the scheduler's own tiles
    for m, inter, k in ((333, 520, 136), (100, 1032, 256)):
        x = torch.randn(m, k, device="cuda").bfloat16()
        w = ck.pack_gated_weight(kaiming(inter, k), kaiming(inter, k))
        out = torch.full((m, inter), float("nan"), dtype=torch.bfloat16, device="cuda")
        ck.gated_mlp_up(x, w, activation="swiglu", out=out)
        check_against_reference(out, x, w, "swiglu")


@pytest.mark.parametrize("m", [1, 8, 9, 16, 17, 32, 33, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_rows(m, dtype):
    """Decode-sized calls (the 64 x 128 x 128 tile; on Hopper only the first 8 / 16 / 32 rows
    of each A tile are loaded, the smallest that holds M): every row right, with a bias, a
    residue I and K, both 16-bit dtypes."""
    inter, k = 264, 1000
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = ck.pack_gated_weight(kaiming(inter, k, dtype=dtype), kaiming(inter, k, dtype=dtype))
    bias = torch.randn(2 * inter, device="cuda").to(dtype)
    out = torch.full((m, inter), float("nan"), dtype=dtype, device="cuda")
    ck.gated_mlp_up(x, w, activation="geglu_tanh", bias=bias, out=out)
    check_against_reference(out, x, w, "geglu_tanh", bias)


@pytest.mark.parametrize("path", PATHS)
def test_repeat_calls_run_the_cached_plan_on_their_own_tensors(path):
    """Repeat calls of one metadata (a decode loop) reuse the plan: each runs on its own x,
    bias and out, 2-D and batched, with and without out; a misaligned view of a cached shape
    is still refused."""
    w = ck.pack_gated_weight(kaiming(520, 264), kaiming(520, 264))
    with ck.force_path(path):
        for shape in ((77, 264), (3, 29, 264)):
            for i in range(3):
                x = torch.randn(*shape, device="cuda").bfloat16()
                bias = torch.randn(1040, device="cuda").bfloat16()
                if i == 2:
                    out = ck.gated_mlp_up(x, w, bias=bias)
                else:
                    out = torch.full((*shape[:-1], 520), float("nan"), dtype=torch.bfloat16,
                                     device="cuda")
                    assert ck.gated_mlp_up(x, w, bias=bias, out=out) is out
                check_against_reference(out, x, w, "swiglu", bias)
        buf = torch.randn(77 * 264 + 8, device="cuda").bfloat16()
        with pytest.raises(ValueError, match="16-byte"):
            ck.gated_mlp_up(buf[4:4 + 77 * 264].view(77, 264), w)


@pytest.mark.parametrize("path", PATHS)
def test_drift_limiter_forced(forced_drift_limiter, path):
    """The gated op with the GEMM's wave drift limiter forced on (small shapes, many waves);
    on Hopper the tile counter must end at the number of cluster tiles."""
    for m, inter, k in ((3001, 1544, 136), (77, 2056, 264)):
        x = torch.randn(m, k, device="cuda").bfloat16()
        w = ck.pack_gated_weight(kaiming(inter, k), kaiming(inter, k))
        out = torch.full((m, inter), float("nan"), dtype=torch.bfloat16, device="cuda")
        with ck.force_path(path):
            ck.gated_mlp_up(x, w, activation="swiglu", out=out)
        check_against_reference(out, x, w, "swiglu")
    forced_drift_limiter.check()
