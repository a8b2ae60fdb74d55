"""Block-sparse attention (issue 15) on the CPU: the block lists of a FlexAttention BlockMask
or of a dense mask, the element masks, the float32 reference against SDPA with the same
boolean mask, validation before anything compiles, and the kernel's PTX (no GPU needed)."""

import itertools
import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask

from cute_kernels import masks
from cute_kernels.ops import block_sparse as bs

BF = torch.bfloat16


def qkv(b=1, h=2, s_q=300, s_kv=300, d=64, h_kv=None):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, s_q, d, generator=g).to(BF)
    k = torch.randn(b, h_kv or h, s_kv, d, generator=g).to(BF)
    v = torch.randn(b, h_kv or h, s_kv, d, generator=g).to(BF)
    return q, k, v


def sdpa(q, k, v, allowed):
    """float32 SDPA with a boolean mask (rows with no key: 0)."""
    rep = q.shape[1] // k.shape[1]
    kf, vf = (t.float().repeat_interleave(rep, 1) for t in (k, v))
    o = F.scaled_dot_product_attention(q.float(), kf, vf, attn_mask=allowed)
    return torch.where(allowed.any(-1, keepdim=True), o, 0.0)


def flex_mask(fn, b, h, s_q, s_kv):
    return create_block_mask(fn, B=b, H=h, Q_LEN=s_q, KV_LEN=s_kv, device="cpu")


@pytest.mark.parametrize("name, mask, fn", [
    ("causal", masks.causal(), lambda b, h, q, kv: q >= kv),
    ("window", masks.sliding_window(100), lambda b, h, q, kv: (q >= kv) & (q - kv < 100)),
    ("prefix", masks.prefix_lm(150), lambda b, h, q, kv: (kv < 150) | (q >= kv)),
])
def test_reference_matches_sdpa_under_the_flex_mask(name, mask, fn):
    q, k, v = qkv(s_q=400, s_kv=400)
    block_mask = flex_mask(fn, None, None, 400, 400)
    o, lse = bs.block_sparse_attention_reference(q, k, v, block_mask, mask=mask)
    qi, ki = torch.arange(400).view(-1, 1), torch.arange(400).view(1, -1)
    allowed = fn(0, 0, qi, ki).expand(1, 2, 400, 400)
    torch.testing.assert_close(o, sdpa(q, k, v, allowed), atol=1e-5, rtol=1e-5)
    assert bool(torch.isfinite(lse).all())


def test_document_mask_and_empty_rows():
    q, k, v = qkv(b=2, s_q=333, s_kv=333)
    doc = torch.tensor([[0] * 100 + [1] * 200 + [2] * 33, [0] * 333], dtype=torch.int32)
    dense = (doc[:, None, :, None] == doc[:, None, None, :]).expand(2, 2, 333, 333)
    lists = bs.block_mask_from_dense(dense)
    o, _ = bs.block_sparse_attention_reference(q, k, v, lists, mask=masks.document(),
                                               doc_ids=doc)
    torch.testing.assert_close(o, sdpa(q, k, v, dense), atol=1e-5, rtol=1e-5)
    # no key blocks at all for one query block: o = 0 and lse = -inf there
    counts, indices, full_counts, full_indices = lists
    full_counts = full_counts.clone()
    counts = counts.clone()
    counts[:, :, 1] = 0
    full_counts[:, :, 1] = 0
    o, lse = bs.block_sparse_attention_reference(q, k, v, (counts, indices, full_counts,
                                                           full_indices),
                                                 mask=masks.document(), doc_ids=doc)
    assert bool((o[:, :, 128:256] == 0).all()) and bool((lse[:, :, 128:256] == -torch.inf).all())


def test_block_mask_from_dense_classifies_blocks():
    mask = torch.zeros(1, 1, 300, 500, dtype=torch.bool)
    mask[:, :, :128, :128] = True          # full
    mask[:, :, :128, 300:310] = True       # partial (key block 2)
    mask[:, :, 256:, 384:] = True          # full: the residue rows/keys count as covered
    counts, indices, full_counts, full_indices = bs.block_mask_from_dense(mask)
    assert counts.tolist() == [[[1, 0, 0]]] and indices[0, 0, 0, 0] == 2
    assert full_counts.tolist() == [[[1, 0, 1]]]
    assert full_indices[0, 0, 0, 0] == 0 and full_indices[0, 0, 2, 0] == 3
    lists = bs.block_lists((counts, indices, full_counts, full_indices), 1, 1, 300, 500)
    assert torch.equal(bs.dense_mask(lists, 300, 500, None) & mask, mask)


def test_gqa_and_broadcast_lists():
    q, k, v = qkv(b=2, h=4, s_q=256, s_kv=384, h_kv=2)
    block_mask = flex_mask(lambda b, h, q, kv: kv <= q + 128, None, None, 256, 384)
    mask = masks.custom(fn=lambda b, h, q, kv: kv <= q + 128,
                        torch_fn=lambda b, h, q, kv: kv <= q + 128)
    o, _ = bs.block_sparse_attention_reference(q, k, v, block_mask, mask=mask)
    allowed = (torch.arange(384).view(1, -1) <= torch.arange(256).view(-1, 1) + 128)
    torch.testing.assert_close(o, sdpa(q, k, v, allowed.expand(2, 4, 256, 384)), atol=1e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("bad, error, match", [
    ("size", ValueError, r"block size \(query, key\) must be"),
    ("lengths", ValueError, r"made for \(Q_LEN, KV_LEN\)"),
    ("type", TypeError, "block_mask must be"),
    ("shape", ValueError, "kv_num_blocks must have shape"),
    ("range", ValueError, "kv_indices lists a key block outside"),
    ("count", ValueError, "kv_num_blocks must be in"),
    ("half", ValueError, "both or none"),
])
def test_bad_block_masks_raise(bad, error, match):
    q, k, v = qkv(s_q=300, s_kv=300)
    good = flex_mask(lambda b, h, q, kv: q >= kv, None, None, 300, 300)
    counts, indices = good.kv_num_blocks, good.kv_indices
    arg = {
        "size": create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 300, 300,
                                  device="cpu", BLOCK_SIZE=(32, 32)),
        "lengths": flex_mask(lambda b, h, q, kv: q >= kv, None, None, 300, 200),
        "type": "causal",
        "shape": (counts[..., :2], indices),
        "range": (counts, indices + 5),
        "count": (counts + 9, indices),
        "half": (counts, indices, counts, None),
    }[bad]
    with pytest.raises(error, match=match):  # values are checked in debug mode only
        bs.block_sparse_attention(q, k, v, arg, mask=masks.causal(), validate=True)
    if bad in ("range", "count"):  # without it: no sync, and the kernels clamp the values
        with pytest.raises(ValueError, match="CUDA"):
            bs.block_sparse_attention(q, k, v, arg, mask=masks.causal())


def test_python_mask_mod_without_a_mask_is_refused():
    q, k, v = qkv()
    block_mask = flex_mask(lambda b, h, q, kv: q >= kv, None, None, 300, 300)
    with pytest.raises(ValueError, match="cannot be traced into the kernel: pass mask="):
        bs.block_sparse_attention(q, k, v, block_mask)


def test_validate_catches_a_mask_that_disagrees_with_the_mask_mod():
    q, k, v = qkv()
    block_mask = flex_mask(lambda b, h, q, kv: q >= kv, None, None, 300, 300)
    with pytest.raises(ValueError, match="disagrees with block_mask.mask_mod"):
        bs.block_sparse_attention(q, k, v, block_mask, mask=masks.prefix_lm(100), validate=True)


def test_doc_ids_rules():
    q, k, v = qkv()
    lists = bs.block_mask_from_dense(torch.ones(1, 2, 300, 300, dtype=torch.bool))
    with pytest.raises(ValueError, match="needs doc_ids"):
        bs.block_sparse_attention(q, k, v, lists, mask=masks.document())
    with pytest.raises(ValueError, match="doc_ids must have shape"):
        bs.block_sparse_attention(q, k, v, lists, mask=masks.document(),
                                  doc_ids=torch.zeros(1, 299, dtype=torch.int32))
    with pytest.raises(ValueError, match="document"):
        bs.block_sparse_attention(q, k, v, lists, doc_ids=torch.zeros(1, 300, dtype=torch.int32))


def test_mask_constructors_check_their_arguments():
    with pytest.raises(ValueError):
        masks.sliding_window(0)
    with pytest.raises(ValueError):
        masks.prefix_lm(-1)
    with pytest.raises(TypeError):
        masks.custom(3)
    assert masks.sliding_window(5) == masks.sliding_window(5)
    assert hash(masks.causal()) == hash(masks.causal())


def test_cpu_tensors_reach_the_device_check():
    q, k, v = qkv()
    lists = bs.block_mask_from_dense(torch.ones(1, 2, 300, 300, dtype=torch.bool))
    with pytest.raises(ValueError, match="CUDA"):
        bs.block_sparse_attention(q, k, v, lists)


@pytest.mark.parametrize("mask", [None, masks.causal(), masks.sliding_window(1000),
                                  masks.prefix_lm(300), masks.document()])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_block_sparse_kernel_ptx(mask, head_dim):
    """The Hopper kernel driven by block lists: WGMMA, TMA K/V loads (one per visit, as the
    dense kernel), the list entries read from global memory, no local memory or spills."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.registry import instruction_mix
    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(bs.make_build("hopper", BF, head_dim, mask), "sm_90a")
    mix = instruction_mix(ptx)
    assert mix["wgmma"] > 0 and mix["setmaxnreg"] == 2
    assert "ld.global" in ptx  # the block lists
    if mask is not None and mask.kind == "document":
        assert "ld.global.b32" in ptx  # the ids
    assert "ld.local" not in ptx and "st.local" not in ptx
    # D = 128 runs the softmax/MMA overlap under the masks too: ptxas 13.0 spills 44 bytes
    # with the causal and window masks, 168 with the document ids (4 with prefix-LM since the
    # mask skips full blocks), and it still ran 1.09-1.27x faster than the spill-free
    # sequential loop (perf/RESULTS.md, H100)
    spill_ok = 0
    if head_dim == 128 and mask is not None:
        spill_ok = {"document": 176, "prefix_lm": 8}.get(mask.kind, 48)
    _assert_no_spills(ptx, "sm_90a", allowed=spill_ok)


def test_custom_cute_mask_is_traced():
    import cutlass.cute as cute

    from cute_kernels.runtime.compile import compile_ptx

    @cute.jit
    def band(b, h, q, kv):
        return kv + 64 >= q

    ptx = compile_ptx(bs.make_build("hopper", BF, 64, masks.custom(band)), "sm_90a")
    assert "wgmma.mma_async" in ptx
    # the function's comparison is in the kernel: not the unmasked kernel, not the causal one
    assert ptx != compile_ptx(bs.make_build("hopper", BF, 64, None), "sm_90a")
    assert ptx != compile_ptx(bs.make_build("hopper", BF, 64, masks.causal()), "sm_90a")


@pytest.mark.parametrize("mask", [None, masks.causal(), masks.document()])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_block_sparse_ampere_kernel_ptx(mask, head_dim):
    """The FA2 kernel driven by the same lists (each 128-key block two 64-key tiles):
    mma.sync and cp.async, no local memory or spills."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(bs.make_build("ampere", BF, head_dim, mask), "sm_80")
    assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async.cg.shared.global" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, "sm_80")


def test_list_blocks_split_into_kernel_tiles():
    """A 128-key list block is visited as 128 / block_n kernel tiles, partial entries first."""
    from cute_kernels.kernels.attention.block_info import BlockListKeyBlocks

    policy = BlockListKeyBlocks((128, 64), masks.causal())
    assert policy.split == 2
    with pytest.raises(ValueError, match="must divide"):
        BlockListKeyBlocks((128, 96))


@pytest.mark.parametrize("q_block, kv_block", [(128, 32), (64, 16), (128, 64)])
def test_packed_small_blocks_become_row_lists(q_block, kv_block):
    """Small key blocks are packed: each query block's listed blocks become its key rows, the
    column-sparse kernels' lists, and the column-sparse reference on them equals the
    block-sparse reference."""
    from cute_kernels.ops.column_sparse import column_sparse_attention_reference

    s_q, s_kv = 300, 333
    g = torch.Generator().manual_seed(1)
    blocks = torch.rand(1, 2, -(-s_q // q_block), -(-s_kv // kv_block), generator=g) < 0.4
    dense = blocks.repeat_interleave(q_block, 2).repeat_interleave(kv_block, 3)
    lists_t = bs.block_mask_from_dense(dense[:, :, :s_q, :s_kv].contiguous(),
                                       (q_block, kv_block))
    lists = bs.block_lists(lists_t, 1, 2, s_q, s_kv, (q_block, kv_block))
    assert lists.packed and int(lists.partial_counts.sum()) == 0
    indices, counts = bs.packed_rows(lists, s_kv)
    q, k, v = qkv(s_q=s_q, s_kv=s_kv)
    want, _ = bs.block_sparse_attention_reference(q, k, v, lists_t,
                                                  block_size=(q_block, kv_block))
    got, _ = column_sparse_attention_reference(q, k, v, indices, counts, group=q_block)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert bool((indices[..., :1] >= 0).all()) and int(indices.max()) < s_kv


@pytest.mark.parametrize("s_kv", [333, 320])
def test_packed_rows_merge_partial_and_full_lists(s_kv):
    """Partial and full lists both in use, in random order, padded with garbage past their
    counts, the residue block anywhere in them: the packed rows still give the block-sparse
    reference (the residue block's rows past S_kv fall past the count)."""
    from cute_kernels.ops.column_sparse import column_sparse_attention_reference

    s_q, q_block, kv_block = 256, 128, 32
    m, n = s_q // q_block, -(-s_kv // kv_block)
    g = torch.Generator().manual_seed(2)
    on = torch.rand(1, 2, m, n, generator=g) < 0.6
    on[..., n - 1] = True  # the residue block (when S_kv has one) is listed everywhere
    full = on & (torch.rand(1, 2, m, n, generator=g) < 0.5)

    def lists(sel):
        order = torch.stack([torch.cat([torch.randperm(n, generator=g)]) for _ in
                             range(2 * m)]).view(1, 2, m, n)
        picked = torch.argsort((~sel.gather(-1, order)).to(torch.int8), dim=-1, stable=True)
        idx = order.gather(-1, picked).to(torch.int32)
        counts = sel.sum(-1).to(torch.int32)
        garbage = torch.arange(n) >= counts.unsqueeze(-1)
        return counts, torch.where(garbage, torch.randint(-9, 99, idx.shape, generator=g,
                                                          dtype=torch.int32), idx)

    block_lists = (*lists(on & ~full), *lists(full))
    lists_obj = bs.block_lists(block_lists, 1, 2, s_q, s_kv, (q_block, kv_block))
    indices, counts = bs.packed_rows(lists_obj, s_kv)
    longest = int((on & ~full).sum(-1).max()) + int(full.sum(-1).max())
    assert indices.shape[-1] == kv_block * longest  # not the lists' width
    q, k, v = qkv(s_q=s_q, s_kv=s_kv)
    want, _ = bs.block_sparse_attention_reference(q, k, v, block_lists,
                                                  block_size=(q_block, kv_block))
    got, _ = column_sparse_attention_reference(q, k, v, indices, counts, group=q_block)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def packed_kernel_semantics(q, k, v, entries, counts, full, kv_block, q_block, mask,
                            doc_ids=None):
    """What the gather kernels compute from masked packed lists (block_info.py
    ``PackedBlockLists``, mask_mod.py ``apply_packed_mask``), in float32 torch: list position
    p of a query block is key ``E * entries[p // E] + p % E`` (the block clamped into the
    keys), hidden past S_kv and, in the first ``count - full`` positions, where ``mask``
    hides it."""
    b, h, s_q, d = q.shape
    s_kv = k.shape[2]
    rep = h // k.shape[1]
    o = torch.zeros(b, h, s_q, d)
    for bi, hi, g in itertools.product(range(b), range(h), range(counts.shape[2])):
        c = int(counts[bi, hi, g])
        rows = torch.arange(g * q_block, min((g + 1) * q_block, s_q))
        if c == 0:
            continue
        p = torch.arange(c)
        block = entries[bi, hi, g, p // kv_block].long().clamp(0, (s_kv - 1) // kv_block)
        key = block * kv_block + p % kv_block
        partial = p < c - int(full[bi, hi, g])
        keyc = key.clamp(max=s_kv - 1)
        bt, ht = torch.tensor(bi), torch.tensor(hi)
        seen = mask.evaluate(bt, ht, rows.view(-1, 1), keyc.view(1, -1), doc_ids)
        allowed = (key < s_kv) & (~partial | seen)
        s = q[bi, hi, rows].float() @ k[bi, hi // rep, keyc].float().T * d ** -0.5
        s = s.masked_fill(~allowed, float("-inf"))
        p_ = torch.softmax(s, -1).nan_to_num(0.0)
        o[bi, hi, rows] = p_ @ v[bi, hi // rep, keyc].float()
    return o


@pytest.mark.parametrize("s_kv", [333, 320])
@pytest.mark.parametrize("q_block, kv_block", [(128, 32), (64, 16)])
@pytest.mark.parametrize("mask", [masks.causal(), masks.sliding_window(90), masks.document()])
def test_masked_packed_entries_give_the_reference(s_kv, q_block, kv_block, mask):
    """Packed small blocks under an element mask: the merged lists (partial blocks first,
    the residue block anywhere) with each list's full positions, read as the kernels read
    them, give the block-sparse reference."""
    s_q = s_kv
    doc = torch.tensor([[0] * 70 + [1] * 200 + [2] * (s_q - 270)], dtype=torch.int32)
    allowed = mask.evaluate(torch.tensor(0), torch.tensor(0), torch.arange(s_q).view(-1, 1),
                            torch.arange(s_kv).view(1, -1), doc)
    block_mask = bs.block_mask_from_dense(allowed.expand(1, 2, s_q, s_kv), (q_block, kv_block))
    lists = bs.block_lists(block_mask, 1, 2, s_q, s_kv, (q_block, kv_block))
    assert lists.packed and int(lists.partial_counts.sum()) > 0
    entries, counts, full = bs.packed_entries(lists, s_kv, masked=True)
    assert bool((full <= counts).all()) and bool((full % kv_block == 0).all())
    q, k, v = qkv(s_q=s_q, s_kv=s_kv, h_kv=1)
    want, _ = bs.block_sparse_attention_reference(q, k, v, block_mask, mask=mask, doc_ids=doc,
                                                  block_size=(q_block, kv_block))
    got = packed_kernel_semantics(q, k, v, entries, counts, full, kv_block, q_block, mask, doc)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path, group, target", [("hopper", 128, "sm_90a"),
                                                 ("ampere", 64, "sm_80")])
@pytest.mark.parametrize("mask", [masks.causal(), masks.document()])
def test_masked_packed_kernel_ptx(path, group, target, mask):
    """The gather kernels with an element mask on packed blocks: the mask changes the kernel
    (list reads in the softmax, the ids for documents), no local memory; Hopper's short-list
    tiles (128 x 64, turns, persistent) and the Ampere kernel spill at most 8 bytes (the
    128 x 128 tiles for long lists spill 28-96 bytes, as the block-list kernels' masks do)."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.ops.column_sparse import make_build
    from cute_kernels.runtime.compile import compile_ptx

    short = path == "hopper"
    plain = compile_ptx(make_build(path, BF, 128, group, False, entry_keys=32, short=short,
                                   persistent=short), target)
    ptx = compile_ptx(make_build(path, BF, 128, group, False, entry_keys=32, short=short,
                                 persistent=short, mask=mask), target)
    assert ptx != plain
    assert ptx.count("ld.global") > plain.count("ld.global")
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, target, allowed=8)


BSR_BETA = pytest.mark.filterwarnings("ignore:Sparse BSR tensor support is in beta")


@BSR_BETA
@pytest.mark.parametrize("g, batch", [(128, ()), (64, (2,)), (128, (1, 2))])
def test_bsr_layout_gives_the_same_attention(g, batch):
    """A torch.sparse_bsr layout's stored blocks are the visible ones."""
    s_q, s_kv = 256, 384
    gen = torch.Generator().manual_seed(5)
    blocks = torch.rand(s_q // g, s_kv // g, generator=gen) < 0.5
    blocks[0, 0] = True
    # torch's batched BSR needs as many blocks in every batch entry: shift the pattern
    blocks = torch.stack([blocks.roll(i, 1) for i in range(max(1, len(batch) and batch[-1]))])
    blocks = blocks.reshape(*batch, s_q // g, s_kv // g) if batch else blocks[0]
    dense = blocks.repeat_interleave(g, -2).repeat_interleave(g, -1)
    layout = dense.float().to_sparse_bsr((g, g))
    lists, size = bs.lists_from_bsr(layout)
    assert size == (g, g) and lists[2].shape[-1] == s_q // g
    q, k, v = qkv(b=1, h=2, s_q=s_q, s_kv=s_kv)
    want, _ = bs.block_sparse_attention_reference(q, k, v, lists, block_size=size)
    mask = dense.reshape(*(1,) * (2 - len(batch)), *batch, s_q, s_kv).expand(1, 2, s_q, s_kv)
    torch.testing.assert_close(want, sdpa(q, k, v, mask), atol=1e-5, rtol=1e-5)
    via_op, _ = bs.block_sparse_attention_reference(q, k, v, layout)
    torch.testing.assert_close(via_op, want)


@BSR_BETA
def test_bsr_layout_rules():
    dense = torch.ones(256, 256).to_sparse_bsr((32, 32))
    with pytest.raises(ValueError, match="square, 64 or 128"):
        bs.lists_from_bsr(dense)
    with pytest.raises(TypeError, match="sparse_bsr"):
        bs.lists_from_bsr(torch.ones(4, 4))
    q, k, v = qkv(s_q=256, s_kv=256)
    with pytest.raises(ValueError, match="the BSR layout is"):
        bs.block_sparse_attention_reference(q, k, v, torch.ones(128, 256).to_sparse_bsr((64, 64)))


def test_64_row_query_blocks_with_an_element_mask():
    """(64, 128) blocks run the block-list kernels (the FA2 kernel's 64-row tile), masks
    included; the reference agrees with SDPA under FlexAttention's causal mask."""
    q, k, v = qkv(s_q=300, s_kv=300)
    block_mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 300, 300,
                                   device="cpu", BLOCK_SIZE=(64, 128))
    lists = bs.block_lists(block_mask, 1, 2, 300, 300)
    assert lists.block_size == (64, 128) and not lists.packed
    o, _ = bs.block_sparse_attention_reference(q, k, v, block_mask, mask=masks.causal())
    allowed = (torch.arange(300).view(-1, 1) >= torch.arange(300).view(1, -1))
    torch.testing.assert_close(o, sdpa(q, k, v, allowed.expand(1, 2, 300, 300)), atol=1e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_64_row_query_block_kernel_ptx(target):
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.runtime.compile import compile_ptx

    path = "hopper" if target == "sm_90a" else "ampere"
    ptx = compile_ptx(bs.make_build(path, BF, 128, masks.causal(), q_block=64), target)
    assert "mma.sync.aligned.m16n8k16" in ptx and "wgmma" not in ptx  # the FA2 kernel
    _assert_no_spills(ptx, target)


def test_dense_tile_order_balances_causal_tiles(monkeypatch):
    """The persistent walks (CSR): fewer tiles than CTAs, one tile each; causal tiles dealt
    longest first to the CTA that frees up first, so the CTAs' estimated work ends within
    one tile; two CTAs per SM double the CTAs."""
    from cute_kernels.ops import attention as attn

    monkeypatch.setattr(attn, "_TILE_ORDERS", {})
    monkeypatch.setattr(attn, "sm_count", lambda device: 132)  # no GPU here
    cpu = torch.device("cpu")
    walks, ctas = attn.dense_tile_order(1, 2, 300, 300, True, (128, 128), 1, cpu)
    assert ctas == 6 and walks.tolist() == [7, 8, 9, 10, 11, 12, 13, 2, 5, 1, 4, 0, 3]
    walks, _ = attn.dense_tile_order(1, 2, 300, 300, False, (128, 128), 1, cpu)
    assert walks.tolist()[7:] == list(range(6))
    walks, ctas = attn.dense_tile_order(4, 16, 2048, 2048, True, (64, 64), 2, cpu)
    assert ctas == 264 and walks.dtype == torch.int32
    walks = walks.tolist()
    assert sorted(walks[265:]) == list(range(4 * 16 * 32))
    costs = attn.tile_costs(32, 2048, 2048, True, (64, 64))
    work = [sum(costs[t % 32] for t in walks[walks[c]:walks[c + 1]]) for c in range(264)]
    assert max(work) - min(work) <= max(costs)


def test_snake_walks_deal_laps_both_ways():
    """The device-side walks of a tile order: a lap of CTAs forward, the next backward; CSR
    offsets first; fewer tiles than CTAs, one each."""
    from cute_kernels.ops.tile_order import snake_walks

    order = torch.arange(100, 110, dtype=torch.int32)
    assert snake_walks(order, 3).tolist() == [4, 7, 10, 14, 100, 105, 106, 101, 104, 107,
                                              102, 103, 108, 109]
    assert snake_walks(order, 20).tolist() == list(range(11, 22)) + list(range(100, 110))
    for n, c in [(2048, 264), (13, 7), (14, 7), (15, 7)]:
        walks = snake_walks(torch.randperm(n).int(), c).tolist()
        c = min(c, n)
        assert walks[c] == len(walks) and sorted(walks[c + 1:]) == list(range(n))
        sizes = [walks[i + 1] - walks[i] for i in range(c)]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("residue", [0, 5])
@pytest.mark.parametrize("q_block, kv_block", [(128, 32), (64, 16)])
def test_packed_entries_name_the_same_keys_as_packed_rows(q_block, kv_block, residue):
    """The in-kernel expansion's input: merged block lists whose expansion (E list[p // E] +
    p % E for positions below the count) is packed_rows' key rows, without a sync; where S_kv
    ends inside a block, that block goes last and the count stops at S_kv."""
    s_q, s_kv = 256, 512 - residue
    g = torch.Generator().manual_seed(kv_block)
    m, n = s_q // q_block, -(-s_kv // kv_block)
    on = torch.rand(1, 2, m, n, generator=g) < 0.4
    full = on & (torch.rand(1, 2, m, n, generator=g) < 0.5)

    def lists(sel):
        order = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return sel.sum(-1).to(torch.int32), order

    lists_obj = bs.block_lists((*lists(on & ~full), *lists(full)), 1, 2, s_q, s_kv,
                               (q_block, kv_block))
    entries, counts = bs.packed_entries(lists_obj, s_kv)
    rows, row_counts = bs.packed_rows(lists_obj, s_kv)
    assert torch.equal(counts, row_counts)
    for idx in itertools.product(*map(range, counts.shape)):
        c = int(counts[idx])
        pos = torch.arange(c)
        expanded = entries[idx][pos // kv_block] * kv_block + pos % kv_block
        assert sorted(expanded.tolist()) == sorted(rows[idx][:c].tolist())
        assert c == 0 or int(expanded.max()) < s_kv
    if residue:
        assert int((counts % kv_block != 0).sum()) > 0  # lists holding the residue block


@pytest.mark.parametrize("path, group, target", [("hopper", 128, "sm_90a"),
                                                 ("ampere", 64, "sm_80")])
def test_gather_kernels_expand_block_lists(path, group, target):
    """entry_keys > 1 compiles on both gather kernels: the list index becomes p >> log2(E)
    and the key row list * E + (p & (E - 1))."""
    from cute_kernels.ops.column_sparse import make_build
    from cute_kernels.runtime.compile import compile_ptx
    from cute_kernels.tuning.attention import hopper_gather_config

    plain = compile_ptx(make_build(path, torch.bfloat16, 128, group, False), target)
    # (Hopper's default for such lists is one TMA box per block, test_ptx.py; this is its
    # row gather)
    config = ({k: v for k, v in hopper_gather_config(128, group, entry_keys=32).items()
               if k != "gather_tma"} if path == "hopper" else None)
    packed = compile_ptx(make_build(path, torch.bfloat16, 128, group, False, entry_keys=32,
                                    config=config), target)
    assert packed != plain

    def count(ptx, op):
        return len(re.findall(rf"\b{re.escape(op)}\b", ptx))

    # the expansion adds shifts and masks (power-of-two E) to the index math, no multiply
    for op in ("shl.b32", "and.b32"):
        assert count(packed, op) > count(plain, op), op
    assert count(packed, "mul.lo.s32") == count(plain, "mul.lo.s32")

