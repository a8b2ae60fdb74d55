"""Column-sparse attention on the CPU (cute_kernels/ops/column_sparse.py): the argument rules,
the float32 reference against a loop over groups, the op's routes (meta, torch.compile, eager;
its kernels are not merged yet), and the index builders ``column_indices`` and
``topk_indices`` against loops and ``torch.topk``."""

import math

import pytest
import torch

import cute_kernels as ck
from cute_kernels import reference
from cute_kernels.ops import column_sparse as cs
from cute_kernels.ops.bitpack import pack_mask_reference
from cute_kernels.runtime import validate as validate_mod

BF = torch.bfloat16
I32 = torch.int32


def qkv(b=2, h=4, h_kv=2, s_q=200, s_kv=40, d=64, dtype=BF, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda hh, s: torch.randn(b, hh, s, d, generator=g).to(dtype)  # noqa: E731
    return mk(h, s_q), mk(h_kv, s_kv), mk(h_kv, s_kv)


def lists(b, h, groups, length, s_kv, counts, seed=1, duplicates=False):
    """Random unsorted index lists (B, H, G, L) whose entries past the count are junk (out of
    range: the reference must not read them), and counts cycling through ``counts``."""
    g = torch.Generator().manual_seed(seed)
    if duplicates:
        idx = torch.randint(s_kv, (b, h, groups, length), generator=g)
    else:
        idx = torch.stack([torch.randperm(s_kv, generator=g)[:length]
                           for _ in range(b * h * groups)]).view(b, h, groups, length)
    cnt = torch.tensor(counts, dtype=I32).repeat(b * h * groups)[:b * h * groups]
    cnt = cnt[torch.randperm(cnt.numel(), generator=g)].view(b, h, groups)
    junk = torch.arange(length) >= cnt.unsqueeze(-1)
    idx = torch.where(junk, torch.tensor(-12345), idx)
    return idx.to(I32), cnt


def naive(q, k, v, indices, counts, group, scale=None, out=None, accumulate=False,
          out_scale=1.0):
    """float64, one (batch, head, group) at a time."""
    b, h, s_q, d = q.shape
    rep = h // k.shape[1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    o = torch.zeros(b, h, s_q, d, dtype=torch.float64)
    lse = torch.full((b, h, s_q), float("-inf"), dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for gi in range(indices.shape[2]):
                rows = slice(gi * group, min((gi + 1) * group, s_q))
                keys = indices[bi, hi, gi, :int(counts[bi, hi, gi])].long()
                if keys.numel() == 0:
                    continue
                kk = k[bi, hi // rep, keys].double()
                vv = v[bi, hi // rep, keys].double()
                s = q[bi, hi, rows].double() @ kk.T * scale
                lse[bi, hi, rows] = torch.logsumexp(s, -1)
                o[bi, hi, rows] = torch.softmax(s, -1) @ vv
    o = o * out_scale
    if accumulate:
        o = out.double() + o
    return o, lse


def ref(q, k, v, indices, counts, **kw):
    return reference.column_sparse_attention(q, k, v, indices, counts, return_lse=True, **kw)


def close(got, expect):
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


# --- the reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("b, h, h_kv, s_q, s_kv, d, group", [
    (2, 4, 2, 200, 40, 64, 64),     # S_q not a multiple of the group, GQA, B > 1
    (1, 2, 1, 130, 60, 128, 128),   # MQA, D = 128
    (2, 2, 2, 384, 33, 64, 192),    # two full 192-row groups
    (1, 3, 3, 1, 17, 64, 192),      # one query row
])
def test_reference_matches_a_loop_over_groups(b, h, h_kv, s_q, s_kv, d, group):
    q, k, v = qkv(b, h, h_kv, s_q, s_kv, d)
    g = cs.num_groups(s_q, group)
    indices, counts = lists(b, h, g, s_kv, s_kv, [0, 1, 17 % s_kv or 1, s_kv])
    o, lse = ref(q, k, v, indices, counts, group=group)
    assert o.dtype == lse.dtype == torch.float32
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    eo, e_lse = naive(q, k, v, indices, counts, group)
    close(o, eo)
    close(lse, e_lse)


def test_count_zero_gives_zeros_and_minus_infinity():
    q, k, v = qkv(s_q=100, s_kv=20)
    indices, counts = lists(2, 4, 2, 20, 20, [0, 5])
    o, lse = ref(q, k, v, indices, counts, group=64)
    empty = (counts == 0).repeat_interleave(64, dim=2)[:, :, :100]
    assert empty.any() and (~empty).any()
    assert torch.all(o[empty] == 0) and torch.all(torch.isneginf(lse[empty]))
    assert torch.isfinite(lse[~empty]).all()


def test_duplicates_count_twice():
    q, k, v = qkv(b=1, h=1, h_kv=1, s_q=64, s_kv=8)
    counts = torch.tensor([[[3]]], dtype=I32)
    o, lse = ref(q, k, v, torch.tensor([[[[2, 5, 2]]]], dtype=I32), counts, group=64)
    eo, e_lse = naive(q, k, v, torch.tensor([[[[2, 5, 2]]]]), counts, 64)
    close(o, eo)
    close(lse, e_lse)
    # the same as key 2 once with its logit raised by log 2
    s = (q[0, 0].double() @ k[0, 0, [2, 5]].double().T) / 8
    s[:, 0] += math.log(2)
    close(lse[0, 0], torch.logsumexp(s, -1))
    close(o[0, 0], torch.softmax(s, -1) @ v[0, 0, [2, 5]].double())
    # a list of one key repeated is that key
    o1, _ = ref(q, k, v, torch.tensor([[[[6, 6, 6, 6]]]], dtype=I32), counts + 1, group=64)
    close(o1[0, 0], v[0, 0, 6].double().expand(64, -1))


def test_order_of_the_list_does_not_matter():
    q, k, v = qkv(s_q=128, s_kv=50)
    indices, counts = lists(2, 4, 1, 30, 50, [30])
    o, lse = ref(q, k, v, indices, counts, group=128)
    o2, lse2 = ref(q, k, v, indices.flip(-1), counts, group=128)
    torch.testing.assert_close(o, o2, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse, lse2, rtol=1e-6, atol=1e-6)


def test_accumulate_and_out_scale():
    q, k, v = qkv(s_q=70, s_kv=30)
    indices, counts = lists(2, 4, 2, 30, 30, [0, 3, 30])
    out = torch.randn(q.shape).to(BF)
    plain, lse = ref(q, k, v, indices, counts, group=64)
    acc, lse2 = ref(q, k, v, indices, counts, group=64, out=out, accumulate=True,
                    out_scale=-0.5)
    torch.testing.assert_close(acc, out.float() - 0.5 * plain)
    torch.testing.assert_close(lse2, lse)  # lse is the attention's, not scaled
    scaled, _ = ref(q, k, v, indices, counts, group=64, out=out, out_scale=2.0)
    torch.testing.assert_close(scaled, 2 * plain)  # without accumulate out is not read
    eo, _ = naive(q, k, v, indices, counts, 64, out=out, accumulate=True, out_scale=-0.5)
    close(acc, eo)
    assert ref(q, k, v, indices, counts, group=64)[0].shape == q.shape
    assert reference.column_sparse_attention(q, k, v, indices, counts, group=64).shape == q.shape


def test_lists_from_a_mask_are_masked_dense_attention():
    """column_indices then the reference = dense attention with the group's mask."""
    q, k, v = qkv(s_q=150, s_kv=45)
    mask = torch.rand(2, 4, 3, 45, generator=torch.Generator().manual_seed(3)) < 0.3
    mask[0, 0, 0] = False
    indices, counts = cs.column_indices(mask, group=64)
    o, lse = ref(q, k, v, indices, counts, group=64)
    s = q.float() @ k.float().repeat_interleave(2, 1).transpose(-1, -2) / 8
    rows = mask.repeat_interleave(64, dim=2)[:, :, :150]
    s = s.masked_fill(~rows, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    torch.testing.assert_close(o, p @ v.float().repeat_interleave(2, 1), rtol=1e-5, atol=1e-5)


# --- argument rules --------------------------------------------------------------------------


def args(**over):
    q, k, v = qkv(s_q=200, s_kv=40)
    indices, counts = lists(2, 4, 4, 8, 40, [0, 8])
    a = dict(q=q, k=k, v=v, indices=indices, counts=counts, group=64, scale=None, out=None,
             accumulate=False, out_scale=1.0)
    a.update(over)
    return a


def check(**over):
    return cs.validate_column_sparse(**args(**over))


def test_valid_arguments_return_the_scales():
    assert check() == (pytest.approx(1 / 8), 1.0)
    assert check(scale=0.5, out_scale=-2) == (0.5, -2.0)
    a = args()
    assert check(out=torch.empty_like(a["q"]), accumulate=True)[1] == 1.0


I64 = torch.int64
RULES = [
    (dict(q=qkv(s_q=200)[0].float()), TypeError, "q must have dtype bfloat16 or float16"),
    (dict(scale=-1.0), ValueError, "scale must be a finite number > 0"),
    (dict(indices=torch.zeros(2, 4, 4, 8, dtype=I64)), TypeError,
     "indices must have dtype int32"),
    (dict(counts=torch.zeros(2, 4, 4, dtype=I64)), TypeError, "counts must have dtype int32"),
    (dict(indices=[0, 1]), TypeError, "indices must be a torch.Tensor"),
    (dict(indices=torch.zeros(2, 4, 8, dtype=I32)), ValueError, "indices must be 4-D"),
    (dict(indices=torch.zeros(2, 4, 3, 8, dtype=I32)), ValueError,
     r"indices must have shape \(B, H, ceil\(S_q / group\), L\) = \(2, 4, 4, L\) with L >= 1 "
     r"for S_q = 200 and group = 64, got \(2, 4, 3, 8\)"),
    (dict(indices=torch.zeros(2, 4, 4, 0, dtype=I32)), ValueError, "with L >= 1"),
    (dict(counts=torch.zeros(2, 4, 3, dtype=I32)), ValueError,
     r"counts must have shape \(B, H, ceil\(S_q / group\)\) = \(2, 4, 4\)"),
    (dict(counts=torch.zeros(2, 4, 4, 1, dtype=I32)), ValueError, "counts must be 3-D"),
    (dict(group=96), ValueError, r"group must be one of \(64, 128, 192\)"),
    (dict(group=True), ValueError, "group must be one of"),
    (dict(group=128), ValueError, r"= \(2, 4, 2, L\)"),  # the lists are for 64-row groups
    (dict(accumulate=1), TypeError, "accumulate must be a bool"),
    (dict(accumulate=True), ValueError, "out is required with accumulate=True"),
    (dict(out_scale="2"), TypeError, "out_scale must be a number"),
    (dict(out_scale=torch.tensor(2.0)), TypeError, r"out_scale must be a number.*\.item\(\)"),
    (dict(out_scale=float("nan")), ValueError, "out_scale must be a finite number"),
    (dict(out=torch.empty(2, 4, 200, 64)), TypeError, "out must have dtype bfloat16"),
    (dict(out=torch.empty(2, 4, 199, 64, dtype=BF)), ValueError, "out must have q's shape"),
    (dict(out=torch.empty(2, 4, 64, 200, dtype=BF).transpose(-1, -2)), ValueError,
     "out must have a unit-stride head dim"),
    (dict(out=torch.empty(2, 4, 200, 65, dtype=BF)[..., :64]), ValueError,
     "multiples of 16 bytes"),
    (dict(counts=torch.zeros(2, 4, 4, dtype=I32, device="meta")), ValueError,
     "all tensors must be on the same device"),
]


@pytest.mark.parametrize("over, error, message", RULES,
                         ids=[f"{next(iter(r[0]))}-{i}" for i, r in enumerate(RULES)])
def test_each_rule_names_its_argument(over, error, message):
    with pytest.raises(error, match=message):
        check(**over)


def test_index_values():
    indices, counts = lists(1, 2, 3, 8, 40, [0, 5, 8])
    cs.validate_indices(indices, counts, 40)  # junk past the counts is not looked at
    bad = counts.clone()
    bad[0, 1, 2] = 9
    with pytest.raises(ValueError, match=r"counts\[0, 1, 2\] = 9 is outside \[0, L = 8\]"):
        cs.validate_indices(indices, bad, 40)
    bad[0, 1, 2] = -1
    with pytest.raises(ValueError, match=r"counts\[0, 1, 2\] = -1 is outside"):
        cs.validate_indices(indices, bad, 40)
    full = torch.full((1, 2, 3), 8, dtype=I32)
    idx = torch.randint(40, (1, 2, 3, 8), dtype=I32)
    cs.validate_indices(idx, full, 40)
    idx[0, 0, 1, 7] = 40
    with pytest.raises(ValueError, match=r"indices\[0, 0, 1, 7\] = 40 is out of range for "
                                         r"S_kv = 40 \(index < counts\[0, 0, 1\] = 8\)"):
        cs.validate_indices(idx, full, 40)
    idx[0, 0, 1, 7] = -3
    with pytest.raises(ValueError, match=r"indices\[0, 0, 1, 7\] = -3 is out of range"):
        cs.validate_indices(idx, full, 40)
    cs.validate_indices(idx.to("meta"), full.to("meta"), 40)  # no values: nothing to check


def test_the_references_always_check_index_values():
    a = args()
    a["indices"][0, 0, 0, 0] = 40
    a["counts"][0, 0, 0] = 1
    with pytest.raises(ValueError, match="out of range for S_kv = 40"):
        ref(a["q"], a["k"], a["v"], a["indices"], a["counts"], group=64)


@pytest.fixture
def env_validate(monkeypatch):
    def set_env(value):
        monkeypatch.setenv(validate_mod.ENV_VALIDATE, value)
        validate_mod.reset_env_validate()

    monkeypatch.delenv(validate_mod.ENV_VALIDATE, raising=False)
    validate_mod.reset_env_validate()
    yield set_env
    validate_mod.reset_env_validate()


def test_value_checks_run_in_debug_mode_only(env_validate):
    """The op checks index values with validate=True or CUTE_KERNELS_VALIDATE=1; otherwise a
    bad list reaches the route (here the device check of CPU tensors)."""
    a = args()
    a["counts"][0, 0, 0] = 9
    call = dict(a)
    group = call.pop("group")
    for name in ("scale", "out", "accumulate", "out_scale"):
        call.pop(name)
    with pytest.raises(ValueError, match="CUDA"):
        cs.column_sparse_attention(**call, group=group)
    with pytest.raises(ValueError, match=r"counts\[0, 0, 0\] = 9"):
        cs.column_sparse_attention(**call, group=group, validate=True)
    env_validate("1")
    with pytest.raises(ValueError, match=r"counts\[0, 0, 0\] = 9"):
        cs.column_sparse_attention(**call, group=group)
    with pytest.raises(ValueError, match="CUDA"):
        cs.column_sparse_attention(**call, group=group, validate=False)
    env_validate("off")
    with pytest.raises(ValueError, match="CUDA"):
        cs.column_sparse_attention(**call, group=group)
    env_validate("maybe")
    with pytest.raises(ValueError, match="CUTE_KERNELS_VALIDATE must be 1 or 0"):
        cs.column_sparse_attention(**call, group=group)
    with pytest.raises(TypeError, match="validate must be a bool or None"):
        cs.column_sparse_attention(**call, group=group, validate="yes")


# --- the op's routes -------------------------------------------------------------------------


def meta_args(accumulate=False):
    q = torch.empty(1, 4, 300, 64, dtype=BF, device="meta")
    kv = torch.empty(1, 2, 200, 64, dtype=BF, device="meta")
    indices = torch.empty(1, 4, 3, 50, dtype=I32, device="meta")
    counts = torch.empty(1, 4, 3, dtype=I32, device="meta")
    return q, kv, kv.clone(), indices, counts


def test_exported():
    """GPU-verified on an H100 (perf/RESULTS.md), so public: the ops and the module."""
    for name in ("column_sparse_attention", "column_indices", "topk_indices",
                 "ColumnSparseAttention"):
        assert name in ck.__all__ and name not in reference.NOT_YET_PUBLIC
    assert ck.column_sparse_attention is cs.column_sparse_attention
    assert ck.topk_indices is cs.topk_indices


def test_meta_in_meta_out(custom_op_calls):
    q, k, v, indices, counts = meta_args()
    with custom_op_calls() as c:
        o, lse = cs.column_sparse_attention(q, k, v, indices, counts, group=128,
                                            return_lse=True, validate=True)
    assert c.calls == ["cute_kernels::column_sparse_attention"]
    assert (o.shape, o.dtype, o.device.type) == (q.shape, BF, "meta")
    assert (lse.shape, lse.dtype) == ((1, 4, 300), torch.float32)
    out = torch.empty_like(q)
    assert cs.column_sparse_attention(q, k, v, indices, counts, group=128, out=out,
                                      accumulate=True, out_scale=0.5) is out


def test_torch_compile_fullgraph_traces_the_custom_op():
    q, k, v, indices, counts = meta_args()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def call():
        return cs.column_sparse_attention(q, k, v, indices, counts, group=128,
                                          return_lse=True)

    o, lse = torch.compile(call, backend=backend, fullgraph=True)()
    assert len(graphs) == 1
    assert "torch.ops.cute_kernels.column_sparse_attention.default" in graphs[0].code
    assert o.shape == q.shape and lse.shape == (1, 4, 300)


def test_fake_cuda_tensors_take_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(1, 2, 300, 64, dtype=BF, device="cuda")
        indices = torch.empty(1, 2, 2, 7, dtype=I32, device="cuda")
        counts = torch.empty(1, 2, 2, dtype=I32, device="cuda")
        o = cs.column_sparse_attention(q, q, q, indices, counts, validate=True)
        assert o.shape == q.shape and o.device.type == "cuda"


def test_eager_takes_the_direct_route(custom_op_calls, monkeypatch):
    entered = []

    def recorder(*args, **kwargs):
        entered.append((args, kwargs))
        return args[0], None

    monkeypatch.setattr(cs._COLUMN_SPARSE_ATTENTION, "direct", recorder)
    a = args()
    out = torch.empty_like(a["q"])
    with custom_op_calls() as c:
        cs.column_sparse_attention(a["q"], a["k"], a["v"], a["indices"], a["counts"], group=64)
        cs.column_sparse_attention(a["q"], a["k"], a["v"], a["indices"], a["counts"], group=64,
                                   out=out, accumulate=True, out_scale=0.25, scale=0.5)
    assert c.calls == []
    (first, kw1), (second, kw2) = entered
    assert first[5] is None and first[6:] == (64, 0.125, 1.0) and kw1 == {}
    assert second[5] is out and second[6:] == (64, 0.5, 0.25) and kw2["out"] is out


def test_eager_on_cpu_stops_at_the_device_check(custom_op_calls):
    a = args()
    with custom_op_calls() as c, pytest.raises(ValueError, match="q must be on a CUDA device"):
        cs.column_sparse_attention(a["q"], a["k"], a["v"], a["indices"], a["counts"], group=64)
    assert c.calls == []


def test_make_build_picks_the_gather_kernel():
    """Hopper groups 128 / 192 build the warp-specialized gather kernel (64-key tiles at
    D = 128, group 192); group 64 and the Ampere path build the FA2 gather kernel; accumulate
    is compiled in (the launch arguments are checked against the kernels' signature)."""
    from cute_kernels.kernels.attention.sm80 import AttentionSm80
    from cute_kernels.kernels.attention.sm90 import AttentionSm90

    hopper = cs.make_build("hopper", BF, 128, 192, True).fn
    assert isinstance(hopper, AttentionSm90) and hopper.gather and hopper.accumulate
    assert (hopper.block_m, hopper.block_n) == (192, 128)  # tuning/attention.py, measured
    assert cs.make_build("hopper", BF, 64, 128, False).fn.block_n == 128
    for path, group in (("hopper", 64), ("ampere", 64), ("ampere", 128), ("ampere", 192)):
        kernel = cs.make_build(path, BF, 64, group, False).fn
        assert isinstance(kernel, AttentionSm80) and kernel.gather and not kernel.accumulate
        assert group % kernel.block_m == 0


def test_refuses_gradients():
    q, k, v, indices, counts = meta_args()
    with pytest.raises(NotImplementedError, match="no backward"):
        cs.column_sparse_attention(q.requires_grad_(), k, v, indices, counts, group=128)
    with torch.no_grad():
        assert cs.column_sparse_attention(q, k, v, indices, counts, group=128).is_meta


# --- column_indices --------------------------------------------------------------------------


def naive_column_indices(mask, multiple_of):
    rows = mask.reshape(-1, mask.shape[-1])
    n = rows.shape[1]
    out, counts = [], []
    for row in rows:
        cols = list(range(n))
        sel = [j for j in cols if row[j]]
        c = min(-(-len(sel) // multiple_of) * multiple_of, n)
        out.append(sel + [j for j in cols if not row[j]])
        counts.append(c)
    width = max([1, *counts])
    indices = torch.tensor([o[:width] for o in out], dtype=I32).view(*mask.shape[:-1], width)
    return indices, torch.tensor(counts, dtype=I32).view(mask.shape[:-1])


@pytest.mark.parametrize("n", [1, 9, 37, 200])
@pytest.mark.parametrize("multiple_of", [1, 8, 64])
def test_column_indices_match_a_loop(n, multiple_of):
    g = torch.Generator().manual_seed(n * multiple_of)
    mask = torch.rand(2, 3, 4, n, generator=g) < torch.rand(2, 3, 4, 1, generator=g)
    mask[0, 0, 0] = False
    mask[0, 0, 1] = True
    expect = naive_column_indices(mask, multiple_of)
    packed = pack_mask_reference(mask)
    for got in (cs.column_indices(mask, multiple_of=multiple_of),
                cs.column_indices(packed, n=n, multiple_of=multiple_of),
                reference.column_indices(mask, multiple_of=multiple_of),
                reference.column_indices(packed, n=n, multiple_of=multiple_of)):
        assert got[0].dtype == got[1].dtype == I32
        assert torch.equal(got[0], expect[0]) and torch.equal(got[1], expect[1])


def test_column_indices_in_chunks_and_odd_inputs(monkeypatch):
    """Row chunks (tiny here), a non-contiguous mask, junk bits past n, no rows, one row."""
    monkeypatch.setattr(cs, "CHUNK_ELEMENTS", 50)
    g = torch.Generator().manual_seed(5)
    mask = (torch.rand(4, 3, 2, 21, generator=g) < 0.4).transpose(0, 2)
    expect = naive_column_indices(mask, 4)
    got = cs.column_indices(mask, multiple_of=4, group=64)
    assert torch.equal(got[0], expect[0]) and torch.equal(got[1], expect[1])
    packed = pack_mask_reference(mask)
    packed[..., -1] |= 0xE0  # bits 21..23: past n, ignored
    got = cs.column_indices(packed, n=21, multiple_of=4)
    assert torch.equal(got[0], expect[0]) and torch.equal(got[1], expect[1])
    empty = cs.column_indices(torch.zeros(0, 5, dtype=torch.bool))
    assert empty[0].shape == (0, 1) and empty[1].shape == (0,)
    one = cs.column_indices(torch.tensor([False, True, True]))
    assert one[0].tolist() == [1, 2] and one[1].item() == 2


def test_column_indices_rules():
    mask = torch.zeros(2, 2, 3, 20, dtype=torch.bool)
    packed = pack_mask_reference(mask)
    with pytest.raises(TypeError, match="mask must have dtype bool or uint8"):
        cs.column_indices(mask.float())
    with pytest.raises(ValueError, match="n .* is required for a bitpacked"):
        cs.column_indices(packed)
    with pytest.raises(ValueError, match=r"shape\[-1\] = ceil\(n / 8\) = 2 for n = 9, got 3"):
        cs.column_indices(packed, n=9)
    with pytest.raises(ValueError, match="n must be None or mask.shape"):
        cs.column_indices(mask, n=19)
    with pytest.raises(ValueError, match="multiple_of must be >= 1"):
        cs.column_indices(mask, multiple_of=0)
    with pytest.raises(TypeError, match="multiple_of must be an int"):
        cs.column_indices(mask, multiple_of=2.0)
    with pytest.raises(ValueError, match="group must be one of"):
        cs.column_indices(mask, group=100)
    with pytest.raises(ValueError, match="at least one key column"):
        cs.column_indices(mask[..., :0])


# --- topk_indices ----------------------------------------------------------------------------


def recall(indices, scores, k):
    """min over rows of |chosen ∩ true top k| / k (the chosen set may be larger than k)."""
    true = scores.float().topk(k, dim=-1).indices
    hit = torch.zeros(scores.shape, dtype=torch.bool).scatter_(-1, indices.long(), True)
    return hit.gather(-1, true).float().mean(-1).min().item()


def distribution(name, rows, n, g):
    if name == "smooth":  # random walks: long-range structure, many near-ties
        return torch.randn(rows, n, generator=g).cumsum(-1)
    if name == "softmax":
        return torch.softmax(torch.randn(rows, n, generator=g) * 3, -1)
    if name == "cauchy":
        return torch.empty(rows, n).cauchy_(generator=g)
    return torch.empty(rows, n).log_normal_(0.0, 2.0, generator=g)


def well_formed(indices, counts, n, total):
    assert indices.dtype == counts.dtype == I32
    assert indices.shape[-1] == total and torch.all(counts == total)
    assert torch.all(indices[..., 1:] > indices[..., :-1])  # increasing: distinct
    assert indices.min() >= 0 and indices.max() < n


@pytest.mark.parametrize("dist", ["smooth", "softmax", "cauchy", "lognormal"])
@pytest.mark.parametrize("n", [8192, 16384])
@pytest.mark.parametrize("keep", [0.07, 0.2])
def test_topk_recall(dist, n, keep):
    g = torch.Generator().manual_seed(n + int(keep * 100))
    scores = distribution(dist, 6, n, g)
    k = math.ceil(keep * n)
    indices, counts = cs.topk_indices(scores, k, generator=g)
    well_formed(indices, counts, n, k)
    assert recall(indices, scores, k) >= 0.99
    by_sparsity, _ = cs.topk_indices(scores, sparsity=1 - keep, generator=g)
    assert by_sparsity.shape[-1] == math.ceil((1 - (1 - keep)) * n - 1e-9)


@pytest.mark.parametrize("samples, z", [(256, 4.0), (256, -30.0), (64, 0.0)])
def test_topk_estimation_and_redo(samples, z, monkeypatch):
    """Small samples (the estimate at N = 4096) and thresholds set too high on purpose (z < 0:
    rows short of candidates are redone with torch.topk): the top set stays exact."""
    monkeypatch.setattr(cs, "TOPK_SAMPLES", samples)
    monkeypatch.setattr(cs, "TOPK_Z", z)
    g = torch.Generator().manual_seed(7)
    scores = distribution("cauchy", 12, 4096, g).view(3, 4, 4096).to(BF)
    k = 287
    indices, counts = cs.topk_indices(scores, k, generator=g)
    assert indices.shape == (3, 4, k) and counts.shape == (3, 4)
    well_formed(indices, counts, 4096, k)
    # exact but for ties (bf16 scores have many): every chosen score is at least the k-th
    # largest, and every score above it is chosen
    kth = scores.float().topk(k, -1).values[..., -1:]
    assert torch.all(scores.float().gather(-1, indices.long()) >= kth)
    hit = torch.zeros(scores.shape, dtype=torch.bool).scatter_(-1, indices.long(), True)
    assert torch.all(hit | (scores.float() <= kth))


def test_topk_ties_and_infinities(monkeypatch):
    monkeypatch.setattr(cs, "TOPK_SAMPLES", 128)
    scores = torch.zeros(3, 1000)
    scores[1] = float("-inf")
    scores[2, :5] = torch.arange(5.0)
    scores[2, 5:] = float("-inf")
    indices, counts = cs.topk_indices(scores, 100)
    well_formed(indices, counts, 1000, 100)
    assert set(range(5)) <= set(indices[2].tolist())


def test_topk_sizes_padding_and_random_columns():
    g = torch.Generator().manual_seed(11)
    scores = torch.randn(5, 9000, generator=g)
    k = 630
    # multiple_of: the padding takes the next-best columns
    indices, counts = cs.topk_indices(scores, k, multiple_of=64)
    well_formed(indices, counts, 9000, 640)
    assert recall(indices, scores, 640) == 1.0
    # random columns: round(0.1 k) = 63 of them outside the top set, then padding to 64
    indices, counts = cs.topk_indices(scores, k, multiple_of=64, random_fraction=0.1,
                                      generator=torch.Generator().manual_seed(0))
    well_formed(indices, counts, 9000, 704)
    assert recall(indices, scores, 641) == 1.0  # the top 704 - 63 columns are all there
    top = torch.zeros(scores.shape, dtype=torch.bool).scatter_(
        -1, scores.topk(641, -1).indices, True)
    assert torch.all(top.gather(-1, indices.long()).sum(-1) == 641)  # 63 others: random
    again, _ = cs.topk_indices(scores, k, multiple_of=64, random_fraction=0.1,
                               generator=torch.Generator().manual_seed(0))
    assert torch.equal(indices, again)  # the generator decides
    other, _ = cs.topk_indices(scores, k, multiple_of=64, random_fraction=0.1,
                               generator=torch.Generator().manual_seed(1))
    assert not torch.equal(indices, other)
    # capped at N; k = N; one column
    assert cs.topk_indices(scores[:, :100], 90, multiple_of=64)[0].shape == (5, 100)
    assert cs.topk_indices(scores[:, :100], 90, random_fraction=1.0)[0].shape == (5, 100)
    full, _ = cs.topk_indices(scores[:, :50], 50)
    assert torch.equal(full, torch.arange(50, dtype=I32).expand(5, 50))
    one, _ = cs.topk_indices(torch.tensor([3.0]), sparsity=0.99)
    assert one.tolist() == [0]
    # the reference: the same sizes and rule
    ref_idx, ref_counts = reference.topk_indices(scores, k, multiple_of=64)
    assert torch.equal(ref_idx, cs.topk_indices(scores, k, multiple_of=64)[0])


TOPK_RULES = [
    (dict(k=3, sparsity=0.5), TypeError, "exactly one of k and sparsity"),
    (dict(), TypeError, "exactly one of k and sparsity"),
    (dict(k=0), ValueError, "k must be >= 1"),
    (dict(k=101), ValueError, r"k must be <= N = 100"),
    (dict(k=2.0), TypeError, "k must be an int"),
    (dict(sparsity=1.0), ValueError, r"sparsity must be in \[0, 1\)"),
    (dict(sparsity="0.9"), TypeError, "sparsity must be a number"),
    (dict(k=3, multiple_of=0), ValueError, "multiple_of must be >= 1"),
    (dict(k=3, random_fraction=-0.1), ValueError, "random_fraction must be >= 0"),
    (dict(k=3, random_fraction=float("inf")), ValueError, "random_fraction must be a finite"),
    (dict(k=3, generator=0), TypeError, "generator must be a torch.Generator"),
]


@pytest.mark.parametrize("kw, error, message", TOPK_RULES)
def test_topk_rules(kw, error, message):
    with pytest.raises(error, match=message):
        cs.topk_indices(torch.randn(4, 100), **kw)


def test_topk_score_rules():
    with pytest.raises(TypeError, match="scores must have dtype float32, bfloat16 or float16"):
        cs.topk_indices(torch.ones(4, 100, dtype=torch.int32), 3)
    with pytest.raises(ValueError, match="scores must have at least 1 dimension"):
        cs.topk_indices(torch.tensor(1.0), 1)
    with pytest.raises(ValueError, match="at least one column"):
        cs.topk_indices(torch.ones(4, 0), 1)
    with pytest.raises(ValueError, match="generator must be on scores' device type"):
        cs.topk_indices(torch.ones(4, 10, device="meta"), 3, generator=torch.Generator())
