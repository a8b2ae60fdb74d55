"""``ColumnSparseAttention``'s step schedule on the CPU: the GPU ops it calls (attention,
attention_colsum, column_sparse_attention, pack_mask) are replaced by the float32 references,
rounded to the inputs' dtype as the ops return it; the index builders are the real ones (torch,
any device). So these tests check the schedule, the cache math and the state, not the kernels.
"""

import collections
import inspect

import pytest
import torch

import cute_kernels.column_sparse_module as csm
from cute_kernels import reference as ref
from cute_kernels.column_sparse_module import ColumnSparseAttention, _pack_selection
from cute_kernels.ops.column_sparse import column_indices

B, H, H_KV, S, D = 1, 4, 2, 400, 64  # G = 3 groups of 192 (the last one 16 rows), GQA 2:1


class FakeOps:
    """The references in the ops' signatures, recording each call in ``log`` (name, details)
    and each colsum's ``prev_lse``."""

    def __init__(self):
        self.log = []
        self.prev_lse = []

    def calls(self):
        return collections.Counter(name for name, *_ in self.log)

    def attention(self, q, k, v, *, scale=None, return_lse=False):
        self.log.append(("attention",))
        o, lse = ref.attention(q, k, v, scale=scale, return_lse=True)
        return (o.to(q.dtype), lse) if return_lse else o.to(q.dtype)

    def attention_colsum(self, q, k, v, prev_lse, *, group=192, scale=None):
        self.log.append(("attention_colsum", group))
        self.prev_lse.append(prev_lse)
        o, lse, colsum = ref.attention_colsum(q, k, v, prev_lse, group=group, scale=scale)
        return o.to(q.dtype), lse, colsum

    def column_sparse_attention(self, q, k, v, indices, counts, *, group=192, scale=None,
                                out=None, accumulate=False, out_scale=1.0):
        self.log.append(("csp", accumulate, out_scale))
        o = ref.column_sparse_attention(q, k, v, indices, counts, group=group, scale=scale,
                                        out=out, accumulate=accumulate, out_scale=out_scale)
        # the op writes into out and returns it
        return o.to(q.dtype) if out is None else out.copy_(o)

    def column_indices(self, mask, **kw):
        self.log.append(("column_indices",))
        return column_indices(mask, **kw)


@pytest.fixture
def ops(monkeypatch):
    fake = FakeOps()
    real_topk = csm.topk_indices

    def topk(scores, k=None, **kw):
        fake.log.append(("topk",))
        return real_topk(scores, k, **kw)

    for name in ("attention", "attention_colsum", "column_sparse_attention", "column_indices"):
        monkeypatch.setattr(csm, name, getattr(fake, name))
    monkeypatch.setattr(csm, "topk_indices", topk)
    monkeypatch.setattr(csm, "pack_mask", ref.pack_mask)
    return fake


def qkv(seed=0, s_q=S, s_kv=S):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, s_q, D, generator=g)
    k = torch.randn(B, H_KV, s_kv, D, generator=g)
    v = torch.randn(B, H_KV, s_kv, D, generator=g)
    return [t.bfloat16() for t in (q, k, v)]


def drift(ts, seed, amount=0.05):
    g = torch.Generator().manual_seed(1000 + seed)
    return [(t.float() + amount * torch.randn(t.shape, generator=g)).bfloat16() for t in ts]


def close(a, b, tol=2e-2):
    torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


def test_schedule_is_chipmunks_by_default():
    m = ColumnSparseAttention()
    assert [s for s in range(31) if m.is_dense(s)] == [0, 1, 10, 20, 30]
    m = ColumnSparseAttention(dense_steps=3, refresh_every=None)
    assert [s for s in range(40) if m.is_dense(s)] == [0, 1, 2]
    assert all(ColumnSparseAttention(refresh_every=1).is_dense(s) for s in range(5))
    assert m.sparsity == 0.93 and m.k is None
    assert ColumnSparseAttention(k=7).sparsity is None


def test_step_sequence_calls(ops):
    """Dense at 0, 1, 4, 8: step 0 is followed by a dense step (attention only), steps 1, 4
    and 8 pick columns (colsum, top-k, the cache's csp with out_scale -1), the others are one
    accumulating csp each; each colsum gets the previous dense step's lse."""
    m = ColumnSparseAttention(dense_steps=2, refresh_every=4, sparsity=0.8)
    x = qkv()
    per_step, lses = [], []
    for step in range(10):
        start = len(ops.log)
        o = m(*x, step)
        assert o.shape == (B, H, S, D) and o.dtype == torch.bfloat16
        per_step.append(ops.log[start:])
        if m.is_dense(step):
            lses.append(m._lse)
        x = drift(x, step)
    pick = [("attention_colsum", 192), ("topk",), ("csp", True, -1.0)]
    sparse = [("csp", True, 1.0)]
    assert per_step == [[("attention",)], pick, sparse, sparse, pick, sparse, sparse, sparse,
                        pick, sparse]
    # colsum at steps 1, 4, 8 normalised by the lse of steps 0, 1, 4
    assert [p is lse for p, lse in zip(ops.prev_lse, lses)] == [True, True, True]
    assert m.last_step == 9


def test_first_step_followed_by_sparse_step_gets_its_own_lse(ops):
    m = ColumnSparseAttention(dense_steps=1, refresh_every=None, sparsity=0.5)
    q, k, v = qkv()
    m(q, k, v, 0)
    assert [name for name, *_ in ops.log] == ["attention", "attention_colsum", "topk", "csp"]
    _, lse = ref.attention(q, k, v, return_lse=True)
    torch.testing.assert_close(ops.prev_lse[0], lse)


@pytest.mark.parametrize("bitpacked", [False, True])
def test_sparse_step_right_after_dense_step_gives_the_dense_output(ops, bitpacked):
    """o_cache + csp(q, k, v) = o_dense when q, k, v are unchanged (two bf16 roundings)."""
    m = ColumnSparseAttention(dense_steps=1, refresh_every=None, sparsity=0.9,
                              bitpacked_mask=bitpacked)
    x = qkv()
    o_dense = m(*x, 0)
    close(o_dense, ref.attention(*x))
    o_sparse = m(*x, 1)
    close(o_sparse, o_dense)
    assert not torch.equal(m._o_cache, o_dense)  # the cache really is o - csp


def test_all_columns_track_the_dense_output_as_inputs_drift(ops):
    """sparsity 0: csp is dense attention, so o_cache = o - csp cancels and every sparse step
    is the dense attention of its own inputs."""
    m = ColumnSparseAttention(dense_steps=1, refresh_every=None, sparsity=0.0)
    x = qkv()
    m(*x, 0)
    for step in range(1, 4):
        x = drift(x, step, amount=0.3)
        close(m(*x, step), ref.attention(*x))


def test_sparse_steps_reuse_the_state_and_leave_the_cache_alone(ops):
    m = ColumnSparseAttention(dense_steps=1, refresh_every=None, sparsity=0.75)
    x = qkv()
    m(*x, 0)
    indices, counts = m.index_lists()
    cache = m._o_cache.clone()
    for step in range(1, 4):
        x = drift(x, step)
        m(*x, step)
        assert m.index_lists()[0] is indices and m.index_lists()[1] is counts
        assert torch.equal(m._o_cache, cache)
    assert ops.calls()["topk"] == 1
    assert indices.shape == (B, H, 3, 100) and counts.tolist() == [[[100] * 3] * H]


def test_bitpacked_mask_gives_the_same_lists_and_outputs(ops):
    outs = {}
    for bitpacked in (False, True):
        m = ColumnSparseAttention(dense_steps=1, refresh_every=3, sparsity=0.9, multiple_of=16,
                                  random_fraction=0.25, bitpacked_mask=bitpacked,
                                  generator=torch.Generator().manual_seed(5))
        x, outs[bitpacked] = qkv(), []
        for step in range(6):
            outs[bitpacked].append(m(*x, step))
            if step == 0:
                lists = m.index_lists()
            x = drift(x, step)
        outs[bitpacked].append(lists)
        sizes = m.state_bytes()
        g = 3
        if bitpacked:
            assert sizes["indices"] == 0 and sizes["mask"] == B * H * g * (S // 8)
            assert m._mask.dtype == torch.uint8
        else:
            # 40 top + 10 random columns, padded to 64
            assert lists[0].shape[-1] == 64 and (lists[1] == 64).all()
            assert sizes["mask"] == 0 and sizes["indices"] == B * H * g * (64 + 1) * 4
        assert sizes["o_cache"] == B * H * S * D * 2 and sizes["lse"] == B * H * S * 4
        assert sizes["total"] == sum(v for name, v in sizes.items() if name != "total")
    for a, b in zip(outs[False][:-1], outs[True][:-1]):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(outs[False][-1], outs[True][-1]))
    # the mask's sparse steps 1, 2, 4, 5 and its index_lists() call above
    assert ops.calls()["column_indices"] == 5


def test_dense_step_before_another_dense_step_drops_the_state(ops):
    m = ColumnSparseAttention(dense_steps=1, refresh_every=2, sparsity=0.5)
    x = qkv()
    m(*x, 0)
    m(*x, 1)
    assert m.state_bytes()["o_cache"] > 0
    m2 = ColumnSparseAttention(dense_steps=3, sparsity=0.5)
    m2(*x, 0)
    assert m2.state_bytes() == {"indices": 0, "mask": 0, "o_cache": 0,
                                "lse": B * H * S * 4, "total": B * H * S * 4}
    with pytest.raises(RuntimeError, match="no columns picked yet"):
        m2.index_lists()


def test_pack_selection_ignores_entries_past_the_count(ops):
    indices = torch.tensor([[[3, 0, 9, 9], [5, 6, 1, 1]]], dtype=torch.int32)
    counts = torch.tensor([[2, 3]], dtype=torch.int32)
    packed = _pack_selection(indices, counts, 10)
    mask = ref.unpack_mask(packed, 10)
    assert mask[0, 0].nonzero().flatten().tolist() == [0, 3]
    assert mask[0, 1].nonzero().flatten().tolist() == [1, 5, 6]


@pytest.mark.parametrize("steps, match", [
    ([1], "step 1 after no step yet"),
    ([0, 2], "step 2 after step 0"),
    ([0, 1, 1], "step 1 after step 1"),
])
def test_steps_must_be_consecutive_from_zero(ops, steps, match):
    m = ColumnSparseAttention(sparsity=0.5)
    x = qkv()
    with pytest.raises(ValueError, match=match):
        for step in steps:
            m(*x, step)


def test_a_new_sequence_starts_at_step_zero(ops):
    m = ColumnSparseAttention(dense_steps=1, sparsity=0.5)
    x = qkv()
    m(*x, 0)
    m(*x, 1)
    y = qkv(seed=3, s_q=200, s_kv=300)  # another shape is fine in a new sequence
    close(m(*y, 0), ref.attention(*y))
    assert m.last_step == 0 and m.index_lists()[0].shape == (B, H, 2, 150)


@pytest.mark.parametrize("which", ["s_q", "s_kv", "batch", "dtype"])
def test_inputs_changing_within_a_sequence_raise(ops, which):
    m = ColumnSparseAttention(dense_steps=1, sparsity=0.5)
    x = qkv()
    m(*x, 0)
    if which == "s_q":
        y = qkv(s_q=384)
    elif which == "s_kv":
        y = qkv(s_kv=256)
    elif which == "batch":
        y = [torch.cat([t, t]) for t in x]
    else:
        y = [t.half() for t in x]
    with pytest.raises(ValueError, match="this sequence started with q"):
        m(*y, 1)
    assert m.last_step == 0  # the failed call changed nothing
    m(*x, 1)


def test_k_beyond_the_keys_raises_at_the_dense_step(ops):
    m = ColumnSparseAttention(k=S + 1, dense_steps=1)
    with pytest.raises(ValueError, match="k must be <= N"):
        m(*qkv(), 0)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"group": 64}, ValueError, "group must be one of"),
    ({"group": True}, ValueError, "group must be one of"),
    ({"sparsity": 0.9, "k": 10}, TypeError, "exactly one of k and sparsity"),
    ({"sparsity": 1.0}, ValueError, "sparsity must be in"),
    ({"k": 0}, ValueError, "k must be >= 1"),
    ({"k": 2.5}, TypeError, "k must be an int"),
    ({"dense_steps": 0}, ValueError, "dense_steps must be >= 1"),
    ({"refresh_every": 0}, ValueError, "refresh_every must be >= 1"),
    ({"multiple_of": 0}, ValueError, "multiple_of must be >= 1"),
    ({"random_fraction": -0.1}, ValueError, "random_fraction must be >= 0"),
    ({"bitpacked_mask": 1}, TypeError, "bitpacked_mask must be a bool"),
    ({"generator": 3}, TypeError, "generator must be a torch.Generator"),
])
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        ColumnSparseAttention(**kwargs)


@pytest.mark.parametrize("step, error", [(-1, ValueError), (True, TypeError), (1.0, TypeError)])
def test_bad_step_values(ops, step, error):
    with pytest.raises(error, match="step must be"):
        ColumnSparseAttention().forward(*qkv(), step)


@pytest.mark.parametrize("method", ["__init__", "forward", "is_dense"])
def test_methods_document_their_arguments(method):
    fn = getattr(ColumnSparseAttention, method)
    doc = inspect.getdoc(fn)
    names = [p for p in inspect.signature(fn).parameters if p != "self"]
    assert all(name in doc for name in names) and "Raises:" in doc
    assert "Returns:" in doc or method == "__init__"


def test_exported():
    import cute_kernels as ck
    from cute_kernels.column_sparse_module import ColumnSparseAttention

    assert ck.ColumnSparseAttention is ColumnSparseAttention
