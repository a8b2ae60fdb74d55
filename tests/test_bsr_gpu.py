"""The BCSR stages (issue 15) on the GPU, both paths: SDDMM, sparse softmax and SpMM against
the float32 references (``cute_kernels.reference.bsr_*``) and torch's own BSR matmul, fresh
random inputs, every block size, batch dims, a shared layout, empty block rows, strided and
fp16 operands, outputs allocated from poisoned memory, grids of more than one wave."""


import pytest
import torch
from bsr_layouts import random_layout  # tests/ is on pytest's path
from gpu_paths import gen, poison_allocator

from cute_kernels import reference
from cute_kernels.ops import bsr

pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:Sparse BSR tensor support is in beta")]


def layout(batch, m, n, g, keep, dtype=torch.bfloat16):
    """A random CUDA BSR layout (block row 1 empty): ``bsr_layouts.random_layout``."""
    return random_layout(batch, m, n, g, keep, gen(), dtype=dtype)[0]


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("g", [16, 32, 64, 128])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("batch, shared", [((), False), ((2, 3), False), ((4,), True)])
@pytest.mark.parametrize("chunked", [False, True])
def test_three_stages_match_references(g, d, batch, shared, chunked, path, monkeypatch):
    monkeypatch.setattr(bsr, "SDDMM_CHUNKED", chunked)  # both SDDMM kernels
    m, n = 5, 7
    lay = layout(() if shared else batch, m, n, g, 0.4)
    q = torch.randn(*batch, m * g, d, device="cuda", generator=gen()).bfloat16()
    k = torch.randn(*batch, n * g, d, device="cuda", generator=gen()).bfloat16()
    v = torch.randn(*batch, n * g, d, device="cuda", generator=gen()).bfloat16()
    poison_allocator()
    s = bsr.bsr_sddmm(q, k, lay, validate=True)
    want_s = reference.bsr_sddmm(q, k, lay)
    assert torch.equal(s.crow_indices(), want_s.crow_indices().to(torch.int32))
    assert rel_err(s.values(), want_s.values()) < 1e-2

    poison_allocator()
    p = bsr.bsr_softmax(s)
    want_p = reference.bsr_softmax(s)
    assert (p.values().float() - want_p.values()).abs().max().item() < 1e-2
    # each stored scalar row sums to 1
    sums = p.to_dense().float().sum(-1)
    stored = s.to_dense().ne(0).any(-1)
    torch.testing.assert_close(sums[stored], torch.ones_like(sums[stored]), atol=2e-2, rtol=0)

    poison_allocator()
    o = bsr.bsr_spmm(p, v)
    want_o = reference.bsr_spmm(p, v)
    assert o.shape == (*batch, m * g, d) and o.dtype == v.dtype
    assert rel_err(o, want_o) < 1e-2
    assert bool((o[..., g:2 * g, :] == 0).all())  # the empty block row


@pytest.mark.parametrize("g", [32, 64])
def test_spmm_against_torch_bsr_matmul(g, path):
    lay = layout((), 16, 16, g, 0.1)
    v = torch.randn(16 * g, 128, device="cuda", generator=gen()).bfloat16()
    o = bsr.bsr_spmm(lay, v)
    torch_o = (lay @ v).float()
    want = reference.bsr_spmm(lay, v)
    assert rel_err(o, want) <= 2 * rel_err(torch_o, want) + 1e-3


@pytest.mark.parametrize("g", [16, 64])
def test_softmax_with_masked_values_inside_stored_blocks(g, path):
    """-inf scores inside stored blocks (a causal or window mask applied to s), including a
    lane's whole first vector: the rest of the row still normalises (no NaN), as torch's
    dense softmax does."""
    m = 64 // g + 1  # block rows long enough that each lane walks several vectors
    lay = layout((), m, 80 // (g // 16), g, 1.0)
    vals = lay.values().float()
    vals[0, :, :8] = float("-inf")  # the first vector of every scalar row of block row 0
    vals[1::3, :, 3] = float("-inf")
    s = torch.sparse_bsr_tensor(lay.crow_indices(), lay.col_indices(), vals.bfloat16(),
                                size=lay.shape)
    p = bsr.bsr_softmax(s)
    want = reference.bsr_softmax(s)
    assert not bool(torch.isnan(p.values()).any())
    assert (p.values().float() - want.values()).abs().max().item() < 1e-2


@pytest.mark.parametrize("longest_first", [True, False])
@pytest.mark.parametrize("chunked", [True, False])
def test_more_block_rows_than_one_wave(longest_first, chunked, path, monkeypatch):
    """G = 128 with more block rows than SMs (one SpMM CTA per SM at G = 128): SpMM in either
    launch order (``SPMM_LONGEST_FIRST``: sorted by row length, or index order), the
    softmax's one-warp-per-row grid and both SDDMM kernels over many waves; rows of very
    uneven length, every stage against its reference."""
    monkeypatch.setattr(bsr, "SPMM_LONGEST_FIRST", longest_first)
    monkeypatch.setattr(bsr, "SDDMM_CHUNKED", chunked)
    g, m, n = 128, 96, 24
    lay = layout((2,), m, n, g, 0.15)
    pattern = bsr.bsr_pattern("p", lay)
    order = pattern.spmm_order(128)
    identity = torch.arange(m, device="cuda", dtype=order.dtype).expand(2, m)
    lengths = (pattern.crow[:, 1:] - pattern.crow[:, :-1]).gather(1, order.long())
    if longest_first:
        assert bool((lengths[:, 1:] <= lengths[:, :-1]).all())  # the sorted launch order
        assert not torch.equal(order, identity)
    else:
        assert torch.equal(order, identity)
    q = torch.randn(2, m * g, 128, device="cuda", generator=gen()).bfloat16()
    kv = torch.randn(2, n * g, 128, device="cuda", generator=gen()).bfloat16()
    poison_allocator()
    s = bsr.bsr_sddmm(q, kv, lay)
    assert rel_err(s.values(), reference.bsr_sddmm(q, kv, lay).values()) < 1e-2
    p = bsr.bsr_softmax(s)
    assert (p.values().float() - reference.bsr_softmax(s).values()).abs().max().item() < 1e-2
    assert rel_err(bsr.bsr_spmm(p, kv), reference.bsr_spmm(p, kv)) < 1e-2


def test_strided_fp16_operands_and_scale(path):
    g, d = 64, 128
    lay = layout((2,), 4, 6, g, 0.5, torch.float16)
    q = torch.randn(4 * g, 2, d, device="cuda", generator=gen()).half().transpose(0, 1)
    k = torch.randn(2, 6 * g, 2 * d, device="cuda", generator=gen()).half()[..., ::2]  # copied
    s = bsr.bsr_sddmm(q, k, lay, scale=0.05)
    want = reference.bsr_sddmm(q, k, lay, scale=0.05)
    assert s.values().dtype == torch.float16
    assert rel_err(s.values(), want.values()) < 1e-2
    v = torch.randn(2, 6 * g, d, device="cuda", generator=gen()).half()
    p = bsr.bsr_softmax(s)
    assert rel_err(bsr.bsr_spmm(p, v), reference.bsr_spmm(p, v)) < 1e-2


def test_bad_indices_are_clamped_or_refused(path):
    g = 32
    lay = layout((), 3, 3, g, 1.0)
    bad = torch.sparse_bsr_tensor(lay.crow_indices(), lay.col_indices() + 5, lay.values(),
                                  size=lay.shape, check_invariants=False)
    q = torch.randn(3 * g, 64, device="cuda", generator=gen()).bfloat16()
    s = bsr.bsr_sddmm(q, q, bad, validate=False)  # clamped: finite, no illegal access
    torch.cuda.synchronize()
    assert bool(torch.isfinite(s.values().float()).all())
    with pytest.raises(ValueError, match="col_indices must lie in"):
        bsr.bsr_sddmm(q, q, bad, validate=True)
