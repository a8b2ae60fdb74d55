"""The BCSR stages (issue 15) without a GPU: the float32 references against dense torch math on
``to_dense()``, the pattern helpers, input validation, and the kernels' PTX on both targets."""

import pytest
import torch
from bsr_layouts import random_layout  # tests/ is on pytest's path

from cute_kernels import reference
from cute_kernels.ops import bsr

pytestmark = pytest.mark.filterwarnings("ignore:Sparse BSR tensor support is in beta")


def qkv(batch, n, n_kv, d, gen):
    return (torch.randn(*batch, n, d, generator=gen), torch.randn(*batch, n_kv, d, generator=gen),
            torch.randn(*batch, n_kv, d, generator=gen))


@pytest.mark.parametrize("batch, shared", [((), False), ((3,), False), ((2, 2), False),
                                           ((2, 3), True)])
@pytest.mark.parametrize("g", [16, 32])
def test_references_match_dense_math(batch, shared, g):
    gen = torch.Generator().manual_seed(g + len(batch))
    m, n, d = 4, 5, 64
    layout, dense = random_layout(() if shared else batch, m, n, g, 0.5, gen)
    if shared:
        dense = dense.expand(*batch, *dense.shape)
    q, k, v = qkv(batch, m * g, n * g, d, gen)
    scale = 0.3
    s = reference.bsr_sddmm(q, k, layout, scale=scale)
    assert s.layout == torch.sparse_bsr and s.shape == (*batch, m * g, n * g)
    want = scale * q @ k.transpose(-1, -2)
    torch.testing.assert_close(s.to_dense(), want * dense, atol=1e-5, rtol=1e-5)

    p = reference.bsr_softmax(s)
    masked = want.masked_fill(~dense, float("-inf"))
    rows = dense.any(-1, keepdim=True)
    want_p = torch.softmax(masked, -1).nan_to_num(0.0) * rows
    torch.testing.assert_close(p.to_dense(), want_p, atol=1e-6, rtol=1e-5)

    o = reference.bsr_spmm(p, v)
    torch.testing.assert_close(o, p.to_dense() @ v, atol=1e-5, rtol=1e-5)
    assert bool((o[..., g:2 * g, :] == 0).all())  # block row 1 stores nothing


def test_pattern_helpers():
    gen = torch.Generator().manual_seed(0)
    layout, _ = random_layout((2,), 4, 4, 16, 0.5, gen)
    pat = bsr.bsr_pattern("layout", layout)
    rows = pat.rows_of_entries()
    crow = pat.crow.long()
    for b in range(2):
        for r in range(4):
            assert bool((rows[b, crow[b, r]:crow[b, r + 1]] == r).all())
    order = pat.row_order()
    lengths = (crow[:, 1:] - crow[:, :-1]).gather(1, order.long())
    assert bool((lengths[:, :-1] >= lengths[:, 1:]).all())
    assert sorted(order[0].tolist()) == [0, 1, 2, 3]
    pat.check_values()
    bad = bsr.Pattern(pat.crow.clone(), pat.col.clone() + 4, pat.batch, pat.size, pat.block)
    with pytest.raises(ValueError, match="col_indices must lie in"):
        bad.check_values()
    bad = bsr.Pattern(pat.crow.flip(-1).contiguous(), pat.col, pat.batch, pat.size, pat.block)
    with pytest.raises(ValueError, match="crow_indices must start at 0"):
        bad.check_values()


def test_rows_of_entries_are_cached_on_the_layout_until_its_indices_change():
    gen = torch.Generator().manual_seed(0)
    layout, _ = random_layout((2,), 4, 4, 16, 0.5, gen)
    first = bsr.bsr_pattern("layout", layout).rows_of_entries()
    assert bsr.bsr_pattern("layout", layout).rows_of_entries() is first  # a new call, cached
    layout.col_indices().add_(0)  # an in-place edit bumps the version: recomputed
    again = bsr.bsr_pattern("layout", layout).rows_of_entries()
    assert again is not first and torch.equal(again, first)


def test_bad_input_raises_before_anything_runs():
    gen = torch.Generator().manual_seed(1)
    layout, _ = random_layout((), 2, 2, 16, 1.0, gen, empty_row=False)
    q = torch.randn(32, 64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="layout must be a torch.sparse_bsr tensor"):
        bsr.bsr_sddmm(q, q, layout.to_dense())
    with pytest.raises(ValueError, match="square blocks"):
        bsr.bsr_sddmm(q, q, torch.ones(32, 32).to_sparse_bsr((16, 8)))
    with pytest.raises(ValueError, match="square blocks"):
        bsr.bsr_sddmm(q, q, torch.ones(32, 32).to_sparse_bsr((8, 8)))
    with pytest.raises(TypeError, match="q must have dtype"):
        bsr.bsr_sddmm(q.float(), q, layout)
    with pytest.raises(ValueError, match="last dim must be one of"):
        bsr.bsr_sddmm(q[:, :48], q[:, :48], layout)
    with pytest.raises(ValueError, match="k must have 32 rows"):
        bsr.bsr_sddmm(q, q[:16], layout)
    with pytest.raises(ValueError, match="batch dims"):
        bsr.bsr_sddmm(q.expand(2, 32, 64), q.expand(2, 32, 64),
                      torch.ones(3, 32, 32).to_sparse_bsr((16, 16)))
    with pytest.raises(ValueError, match="scale must be finite"):
        bsr.bsr_sddmm(q, q, layout, scale=float("nan"))
    with pytest.raises(ValueError, match="must be on a CUDA device|CUDA"):
        bsr.bsr_sddmm(q, q, layout)
    p = layout.to(torch.bfloat16)
    with pytest.raises(TypeError, match="share a dtype"):
        bsr.bsr_spmm(p, q.half())
    with pytest.raises(TypeError, match="values must be bfloat16 or float16"):
        bsr.bsr_softmax(layout)
    with pytest.raises(TypeError, match="s must be a torch.sparse_bsr tensor"):
        bsr.bsr_softmax(q)


def test_inconsistent_bsr_tensors_are_refused_from_their_shapes():
    """torch builds these with check_invariants=False; the kernels size grids and writes by
    the shapes, so each is refused before anything runs (no sync needed)."""
    good, _ = random_layout((), 2, 2, 16, 1.0, torch.Generator().manual_seed(2),
                            empty_row=False)
    crow, col, values = good.crow_indices(), good.col_indices(), good.values()

    def make(crow, col, values, size):
        return torch.sparse_bsr_tensor(crow, col, values, size=size, check_invariants=False)

    q = torch.randn(32, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="crow_indices needs N / G \\+ 1 = 3"):
        bsr.bsr_pattern("p", make(torch.cat([crow, crow[-1:]]), col, values, (32, 32)))
    with pytest.raises(ValueError, match="col_indices one per stored block"):
        bsr.bsr_pattern("p", make(crow, torch.cat([col, col]), values, (32, 32)))
    with pytest.raises(ValueError, match="multiples of its block 16"):
        bsr.bsr_pattern("p", make(crow, col, values, (32, 40)))
    with pytest.raises(ValueError, match="1 to 65535 entries"):
        bsr.bsr_sddmm(q.expand(0, 32, 64), q.expand(0, 32, 64),
                      make(crow.expand(0, 3), col.expand(0, 4), values.expand(0, 4, 16, 16),
                          (0, 32, 32)))


@pytest.mark.parametrize("op, block, head_dim, target", [
    ("sddmm", 32, 128, "sm_90a"), ("sddmm", 128, 64, "sm_80"), ("sddmm_chunks", 16, 64, "sm_80"),
    ("sddmm_chunks", 128, 128, "sm_90a"), ("spmm", 16, 128, "sm_90a"),
    ("spmm", 32, 64, "sm_80"), ("softmax", 16, None, "sm_80"), ("softmax", 128, None, "sm_90a")])
def test_other_block_sizes_compile(op, block, head_dim, target):
    """The registry's variants cover G = 16 / 64 / 128; these the remaining (G, D, target)
    corners: the same instructions, no spills."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.registry import instruction_mix
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(bsr.make_build(op, torch.bfloat16, block, head_dim), target)
    mix = instruction_mix(ptx)
    families = ({"ld.global.v4", "st.global.v4", "shfl.sync"} if op == "softmax"
                else {"mma.sync", "ldmatrix", "cp.async"})
    assert all(mix[f] > 0 for f in families), mix
    _assert_no_spills(ptx, target)
