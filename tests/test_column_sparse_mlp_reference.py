"""The column-sparse MLP delta's contract (issue 16) on the CPU: the float32 reference against a
per-group loop of plain torch, dense recomputation when every column is listed, the
writeback reference against ``index_add_``, and the validation rules."""

import pytest
import torch
import torch.nn.functional as F

from cute_kernels.ops.column_sparse_mlp import (
    column_sparse_mlp_reference,
    scatter_add_reference,
    validate_column_sparse_mlp,
)

ACT = {"gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu, "silu": F.silu}


def problem(m=300, k=64, f=96, d=48, group=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16()
    w1 = (torch.randn(f, k, generator=g) * 0.1).bfloat16()
    b1 = torch.randn(f, generator=g).bfloat16()
    w2 = (torch.randn(d, f, generator=g) * 0.1).bfloat16()
    act = torch.randn(m, f, generator=g).bfloat16()
    out = torch.randn(m, d, generator=g).bfloat16()
    groups = -(-m // group)
    idx = torch.stack([torch.randperm(f, generator=g) for _ in range(groups)]).int()
    return x, w1, b1, w2, idx, act, out, g


def per_group_loop(x, w1, b1, w2, idx, counts, act, out, group, activation):
    """The same step, one group at a time (the definition the reference vectorises)."""
    act, out = act.float().clone(), out.float().clone()
    for gi in range(idx.shape[0]):
        rows = slice(gi * group, min((gi + 1) * group, x.shape[0]))
        cols = idx[gi, :counts[gi]].long()
        pre = x[rows].float() @ w1.float()[cols].t()
        if b1 is not None:
            pre = pre + b1.float()[cols]
        h = ACT[activation](pre)
        delta = h - act[rows][:, cols]
        act[rows][:, cols] = h  # act[rows] is a view: the write lands in act
        out[rows] += delta @ w2.float()[:, cols].t()
    return out, act


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu", "silu"])
@pytest.mark.parametrize("group", [64, 128])
def test_reference_matches_the_per_group_loop(activation, group):
    x, w1, b1, w2, idx, act, out, g = problem(group=group, seed=len(activation) + group)
    counts = torch.randint(0, idx.shape[1] + 1, (idx.shape[0],), generator=g).int()
    counts[0] = 0  # a group that recomputes nothing
    counts[-1] = 7  # an odd count; M = 300 leaves the last group partial
    want_out, want_act = per_group_loop(x, w1, b1, w2, idx, counts, act, out, group,
                                        activation)
    got_out, got_act = column_sparse_mlp_reference(x, w1, b1, w2, idx, counts, act, out,
                                                   group=group, activation=activation)
    torch.testing.assert_close(got_out, want_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_act, want_act, atol=1e-5, rtol=1e-5)
    # inputs untouched; group 0 unchanged
    assert torch.equal(got_act[:group], act[:group].float())
    assert torch.equal(got_out[:group], out[:group].float())


def test_every_column_listed_is_dense_recomputation():
    x, w1, b1, w2, idx, act, out, _ = problem()
    counts = torch.full((idx.shape[0],), w1.shape[0], dtype=torch.int32)
    got_out, got_act = column_sparse_mlp_reference(x, w1, None, w2, idx, counts, act, out)
    h = ACT["gelu_tanh"](x.float() @ w1.float().t())
    torch.testing.assert_close(got_act, h, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_out, out.float() + (h - act.float()) @ w2.float().t(),
                               atol=1e-4, rtol=1e-4)


def test_scatter_add_reference_matches_index_add():
    _, _, _, _, idx, act, _, g = problem()
    m, width = act.shape[0], 20
    idx = idx[:, :width].contiguous()
    counts = torch.tensor([20, 3, 0], dtype=torch.int32)
    src = torch.randn(m, width, generator=g)
    got = scatter_add_reference(src, act, idx, counts)
    want = act.float().clone()
    for gi in range(3):
        rows = slice(gi * 128, min((gi + 1) * 128, m))
        c = int(counts[gi])
        want[rows].index_add_(1, idx[gi, :c].long(), src[rows, :c])
    torch.testing.assert_close(got, want)


def test_validation_names_the_argument():
    x, w1, b1, w2, idx, act, out, _ = problem()
    counts = torch.ones(idx.shape[0], dtype=torch.int32)

    def check(**changes):
        args = dict(x=x, w1=w1, b1=b1, w2=w2, indices=idx, counts=counts, act_cache=act,
                    out_cache=out, group=128, activation="gelu_tanh")
        args.update(changes)
        validate_column_sparse_mlp(**args)

    check()
    with pytest.raises(TypeError, match="x must have dtype"):
        check(x=x.float())
    with pytest.raises(TypeError, match="w2 must have x's dtype"):
        check(w2=w2.half())
    with pytest.raises(ValueError, match="w1 must be"):
        check(w1=w1[:, :32])
    with pytest.raises(ValueError, match="act_cache must be"):
        check(act_cache=act[:10])
    with pytest.raises(ValueError, match="indices must be"):
        check(indices=idx[:1])
    with pytest.raises(TypeError, match="indices must have dtype"):
        check(indices=idx.long())
    with pytest.raises(ValueError, match="group must be one of"):
        check(group=100)
    with pytest.raises(ValueError, match="activation must be one of"):
        check(activation="relu6")
