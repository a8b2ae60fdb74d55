"""The routing rule every public op follows (ops/dispatch.py), on the CPU: a stand-in op for
the routes, then every public op with meta tensors, under torch.compile(fullgraph=True), and
eager (where the direct route is taken and the custom-op dispatcher is never entered)."""

import pytest
import torch

import cute_kernels as ck
from cute_kernels.ops import attention as attention_ops
from cute_kernels.ops import bitpack as bitpack_ops
from cute_kernels.ops import gated_mlp as gated_ops
from cute_kernels.ops import gemm as gemm_ops
from cute_kernels.ops.dispatch import KernelOp

# --- the routes, with a stand-in op: y = x * factor -----------------------------------------

CALLS = {"direct": 0, "body": 0, "check": 0}


def _scale_direct(x, factor, out=None):
    CALLS["direct"] += 1
    return torch.mul(x, factor, out=out) if out is not None else x * factor


@torch.library.custom_op("ck_test_dispatch::scale", mutates_args=())
def _scale_op(x: torch.Tensor, factor: float) -> torch.Tensor:
    CALLS["body"] += 1
    return x * factor


@_scale_op.register_fake
def _(x, factor):
    return torch.empty_like(x)


_scale_op.register_autograd(lambda ctx, grad: (grad * ctx.factor, None),
                            setup_context=lambda ctx, inputs, output: setattr(
                                ctx, "factor", inputs[1]))


def _check(x, factor):
    CALLS["check"] += 1


SCALE = KernelOp(_scale_op, _scale_direct, grad_inputs=("x",), differentiable=True,
                 check=_check)
SCALE_FORWARD_ONLY = KernelOp(_scale_op, _scale_direct, grad_inputs=("x",))


@pytest.fixture(autouse=True)
def reset_calls():
    CALLS.update(direct=0, body=0, check=0)


def test_eager_goes_direct_without_the_dispatcher(custom_op_calls):
    x = torch.randn(4, 8)
    with custom_op_calls("ck_test_dispatch") as c:
        assert SCALE.route(x, 2.0) == "direct"
        y = SCALE(x, 2.0)
        out = torch.full_like(x, float("nan"))
        assert SCALE(x, 3.0, out=out) is out
    assert c.calls == [] and CALLS == {"direct": 2, "body": 0, "check": 0}
    torch.testing.assert_close(y, 2 * x)
    torch.testing.assert_close(out, 3 * x)
    xg = x.clone().requires_grad_(True)
    with torch.no_grad():
        assert SCALE.route(xg, 2.0) == "direct"
    with torch.inference_mode():
        assert SCALE_FORWARD_ONLY.route(xg, 2.0) == "direct"


def test_autograd_goes_through_the_op(custom_op_calls):
    x = torch.randn(4, 8, requires_grad=True)
    assert SCALE.route(x, 2.0) == "autograd"
    with custom_op_calls("ck_test_dispatch") as c:
        y = SCALE(x, 2.0)
    assert c.calls == ["ck_test_dispatch::scale"] and CALLS["direct"] == 0
    assert CALLS["check"] == 1  # validated before autograd records the call
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    with pytest.raises(ValueError, match="out= is not supported when gradients are required"):
        SCALE(x, 2.0, out=torch.empty(4, 8))


def test_forward_only_op_refuses_gradients():
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="scale has no backward yet.*detach x"):
        SCALE_FORWARD_ONLY(x, 2.0)
    with pytest.raises(NotImplementedError, match="no backward"):  # meta: the same rule
        SCALE_FORWARD_ONLY(torch.empty(2, device="meta", requires_grad=True), 2.0)


def test_meta_goes_to_the_fake():
    x = torch.empty(3, 5, device="meta")
    assert SCALE.route(x, 2.0) == "op"
    y = SCALE(x, 2.0)
    assert y.device.type == "meta" and y.shape == (3, 5) and CALLS["direct"] == 0
    out = torch.empty(3, 5, device="meta")
    assert SCALE(x, 2.0, out=out) is out


def test_torch_compile_uses_the_op():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(4, 8)
    fn = torch.compile(lambda x: SCALE(x, 2.0) + 1, backend=backend, fullgraph=True)
    torch.testing.assert_close(fn(x), 2 * x + 1)
    assert CALLS["direct"] == 0 and CALLS["body"] == 1  # the graph ran the op's body
    assert "torch.ops.ck_test_dispatch.scale.default" in graphs[0].code


def test_grad_inputs_must_name_parameters():
    with pytest.raises(TypeError, match="not parameters"):
        KernelOp(_scale_op, _scale_direct, grad_inputs=("y",))


# --- every public op -------------------------------------------------------------------------

BF = torch.bfloat16


def _attention_args(device):
    q = torch.empty(1, 4, 300, 64, dtype=BF, device=device)
    kv = torch.empty(1, 2, 200, 64, dtype=BF, device=device)
    return q, kv, kv.clone()


def _calls(device):
    """(name, custom op, call, expected output shapes and dtypes) of each public op."""
    q, k, v = _attention_args(device)
    prev = torch.empty(1, 4, 300, device=device)
    x = torch.empty(2, 5, 64, dtype=BF, device=device)
    w = torch.empty(96, 64, dtype=BF, device=device)
    return [
        ("pack_mask", lambda: ck.pack_mask(torch.empty(3, 17, dtype=torch.bool, device=device)),
         [((3, 3), torch.uint8)]),
        ("unpack_mask", lambda: ck.unpack_mask(torch.empty(3, 3, dtype=torch.uint8,
                                                           device=device), 20),
         [((3, 20), torch.bool)]),
        ("gemm_nk", lambda: ck.gemm(x[0], w.t(), out_dtype=torch.float32),
         [((5, 96), torch.float32)]),
        ("gemm_nk", lambda: ck.linear(x, w, epilogue="silu"), [((2, 5, 96), BF)]),
        ("gated_mlp_up", lambda: ck.gated_mlp_up(x, w), [((2, 5, 48), BF)]),
        ("attention", lambda: ck.attention(q, k, v, causal=True, return_lse=True),
         [((1, 4, 300, 64), BF), ((1, 4, 300), torch.float32)]),
        ("attention_colsum", lambda: ck.attention_colsum(q, k, v, prev, group=128),
         [((1, 4, 300, 64), BF), ((1, 4, 300), torch.float32), ((1, 4, 3, 200), torch.float32)]),
    ]


CASES = [c[0] + ("" if i != 3 else "/linear") for i, c in enumerate(_calls("meta"))]


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_meta_in_meta_out(case, custom_op_calls):
    """Meta tensors take the custom op (its fake implementation): shape inference for every op."""
    name, call, expected = _calls("meta")[case]
    with custom_op_calls() as c:
        outs = _outputs(call())
    assert c.calls == [f"cute_kernels::{name}"]
    assert [(tuple(o.shape), o.dtype) for o in outs] == expected
    assert all(o.device.type == "meta" for o in outs)


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_torch_compile_fullgraph_traces_the_custom_op(case):
    """Every op (attention_colsum included) is one custom-op node under fullgraph=True."""
    name, call, expected = _calls("meta")[case]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    outs = _outputs(torch.compile(call, backend=backend, fullgraph=True)())
    assert len(graphs) == 1 and f"torch.ops.cute_kernels.{name}.default" in graphs[0].code
    assert [(tuple(o.shape), o.dtype) for o in outs] == expected


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_eager_takes_the_direct_route(case, custom_op_calls, monkeypatch):
    """Eager calls on real tensors go to the direct route, never through the dispatcher: the
    direct implementations are replaced by a recorder here (no GPU needed)."""
    entered = []

    class Reached(Exception):
        pass

    def recorder(*args, **kwargs):
        entered.append(args)
        raise Reached

    for kop in (bitpack_ops._PACK_MASK, bitpack_ops._UNPACK_MASK, gemm_ops._GEMM,
                gemm_ops._LINEAR, gated_ops._GATED_MLP_UP, attention_ops._ATTENTION,
                attention_ops._ATTENTION_COLSUM):
        monkeypatch.setattr(kop, "direct", recorder)
    name, call, _ = _calls("cpu")[case]
    with custom_op_calls() as c, pytest.raises(Reached):
        call()
    assert c.calls == [] and len(entered) == 1


def test_eager_on_cpu_stops_at_the_device_check(custom_op_calls):
    """Unpatched: the direct route refuses CPU tensors (ValueError naming CUDA) before any
    compile or launch, still without entering the dispatcher."""
    with custom_op_calls() as c:
        for _, call, _ in _calls("cpu"):
            with pytest.raises(ValueError, match="CUDA|same device"):
                call()
    assert c.calls == []


def test_fake_tensors_take_the_op():
    """Tensor subclasses (here the fake CUDA tensors of tracing) need torch's dispatcher: they
    take the custom op, whose fake implementation answers."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(1, 2, 300, 64, dtype=BF, device="cuda")
        prev = torch.empty(1, 2, 300, device="cuda")
        assert attention_ops._ATTENTION.route(q, q, q, False, 0.125) == "op"
        o, lse, colsum = ck.attention_colsum(q, q, q, prev, group=128)
        assert colsum.shape == (1, 2, 3, 300) and o.device.type == "cuda"
        assert ck.pack_mask(torch.empty(3, 17, dtype=torch.bool, device="cuda")).shape == (3, 3)


def test_attention_ops_refuse_gradients():
    q, k, v = _attention_args("meta")
    q.requires_grad_(True)
    with pytest.raises(NotImplementedError, match="attention has no backward yet"):
        ck.attention(q, k, v)
    with pytest.raises(NotImplementedError, match="attention_colsum has no backward yet"):
        ck.attention_colsum(q, k, v, torch.empty(1, 4, 300, device="meta"))
    with torch.no_grad():
        assert ck.attention(q, k, v).device.type == "meta"


def test_differentiable_ops_record_autograd_on_meta():
    x = torch.empty(2, 5, 64, dtype=BF, device="meta", requires_grad=True)
    w = torch.empty(96, 64, dtype=BF, device="meta")
    assert ck.linear(x, w).requires_grad and ck.gated_mlp_up(x, w).requires_grad
    with pytest.raises(ValueError, match="out= is not supported"):
        ck.linear(x, w, out=torch.empty(2, 5, 96, dtype=BF, device="meta"))


@pytest.mark.parametrize("bad", [None, [1, 2], "x"])
def test_arguments_of_the_wrong_type_are_named(bad):
    """A non-tensor where a tensor goes (grad mode on, so the autograd route is asked first)
    raises a TypeError naming the argument, before any plan lookup: never an AttributeError
    from the plan caches or the route."""
    x, w = torch.randn(4, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    q = torch.randn(1, 2, 8, 64).bfloat16()
    calls = [("x", lambda: ck.linear(bad, w)), ("w", lambda: ck.linear(x, bad)),
             ("a", lambda: ck.gemm(bad, w.t())), ("x", lambda: ck.gated_mlp_up(bad, w)),
             ("w_packed", lambda: ck.gated_mlp_up(x, bad)), ("q", lambda: ck.attention(bad, q, q)),
             ("v", lambda: ck.attention(q, q, bad))]
    if bad is not None:  # None is a valid bias / out
        calls += [("bias", lambda: ck.linear(x, w, bias=bad)),
                  ("bias", lambda: ck.gated_mlp_up(x, w, bias=bad))]
    for name, call in calls:
        with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor"):
            call()
    with pytest.raises(ValueError, match="epilogue must be one of"):  # unhashable: no key
        ck.linear(x, w, epilogue=["gelu"])


def test_gated_plan_is_cached_on_metadata_only(monkeypatch):
    """gated_mlp_up validates and plans once per argument metadata and activation; repeat
    calls launch the cached kernel on their own tensors (2-D views of the rows); a call that
    fails validation is never cached."""
    from cute_kernels.ops import gated_mlp as gated_ops

    plans, launches = [], []
    real = gated_ops._validate_gated

    def plan(x, w, bias, activation, out):
        real(x, w, bias, activation)
        plans.append(activation)
        return gated_ops.GatedPlan(w.shape[0] // 2, x.dtype, lambda *a: launches.append(a), 7,
                                   False, True)

    monkeypatch.setattr(gated_ops, "_plan", plan)
    monkeypatch.setattr(gated_ops, "_PLANS", {})
    x, w = torch.randn(2, 3, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    y = ck.gated_mlp_up(x, w)
    x2 = x.clone()
    ck.gated_mlp_up(x2, w)
    assert plans == ["swiglu"] and len(launches) == 2 and y.shape == (2, 3, 16)
    a, b_nk, c, bias, ctas, sync = launches[1]
    assert a.shape == (6, 64) and a.data_ptr() == x2.data_ptr() and b_nk is w
    assert c.shape == (6, 16) and bias is None and ctas == 7 and sync is None
    ck.gated_mlp_up(x, w, activation="geglu")
    assert plans == ["swiglu", "geglu"]
    for _ in range(2):
        with pytest.raises(ValueError, match="multiple of 8"):
            ck.gated_mlp_up(x, torch.randn(24, 64).bfloat16())
    assert plans == ["swiglu", "geglu"] and len(gated_ops._PLANS) == 2


def test_attention_plan_is_cached_on_metadata_only(monkeypatch):
    """attention validates and plans only when the tensors' metadata, the scale or the
    splits change; a call that fails validation is never cached; a cached call still checks
    ``out`` against the inputs' memory (the one check that reads data pointers)."""
    from typing import NamedTuple

    from cute_kernels.ops import attention as att

    calls, runs = [], []
    real = att.validate_attention
    monkeypatch.setattr(att, "validate_attention", lambda *a: calls.append(a[3]) or real(*a))
    monkeypatch.setattr(att, "_check_device_args", lambda **kw: None)  # CPU tensors here
    monkeypatch.setattr(att, "_PLANS", {})

    class FakePlan(NamedTuple):
        scale: float

        def run(self, q, k, v, o, with_lse=True):
            runs.append(self.scale)
            return o, None

    monkeypatch.setattr(att, "make_plan", lambda q, k, causal, scale, splits: FakePlan(scale))
    q = torch.randn(1, 2, 8, 64).bfloat16()
    ck.attention(q, q, q)
    ck.attention(q.clone(), q, q)  # same metadata, another tensor: the cached plan
    assert calls == [None] and runs == [0.125, 0.125]
    ck.attention(q, q, q, scale=0.5)
    ck.attention(q, q, q, causal=True)
    assert calls == [None, 0.5, None] and runs[2:] == [0.5, 0.125]
    strided = torch.randn(1, 2, 64, 8).bfloat16().transpose(-1, -2)  # head dim not unit-stride
    for _ in range(2):
        with pytest.raises(ValueError, match="unit-stride last"):
            ck.attention(strided, strided, strided)
    assert len(calls) == 5
    out = torch.empty_like(q)
    ck.attention(q, q, q, out=out)
    for _ in range(2):  # q as out: same metadata as the cached call, still refused
        with pytest.raises(ValueError, match="out"):
            ck.attention(q, q, q, out=q)
