"""Block-sparse attention (issue 15) on the GPU: the Hopper kernel driven by FlexAttention
block lists against the float32 reference (the dense mask the lists and the element mask
describe) and against flex_attention itself; random block sparsity, the built-in masks, a
traced CuTe mask, empty rows, S not a multiple of the block, GQA, broadcast lists, poisoned
outputs; both kernel paths (docs/attention.md)."""


import pytest
import torch
from gpu_paths import HOPPER, gen  # tests/ is on pytest's path
from torch.nn.attention.flex_attention import create_block_mask

from cute_kernels import masks
from cute_kernels.ops import block_sparse as bs

pytestmark = pytest.mark.gpu

BF = torch.bfloat16


def fresh(*shape):
    return torch.randn(*shape, generator=gen(), device="cuda").to(BF)


def check(q, k, v, block_mask, **kw):
    o, lse = bs.block_sparse_attention(q, k, v, block_mask, return_lse=True, **kw)
    want, want_lse = bs.block_sparse_attention_reference(q, k, v, block_mask, **kw)
    err = (o.float() - want).abs().max().item()
    assert err < 2e-2, err
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse[finite], want_lse[finite], atol=2e-3, rtol=2e-3)
    return o


def block_list(sel):
    """(counts, indices) of the blocks ``sel`` (B, H, M, N) marks: int32, listed first."""
    order = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return sel.sum(-1).to(torch.int32), order


def random_lists(b, h, s_q, s_kv, keep, full_share=0.5):
    """Random block lists: ``keep`` of the blocks, about ``full_share`` of them full."""
    m, n = -(-s_q // 128), -(-s_kv // 128)
    on = torch.rand(b, h, m, n, device="cuda") < keep
    full = on & (torch.rand(b, h, m, n, device="cuda") < full_share)
    partial = on & ~full

    return (*block_list(partial), *block_list(full))


@pytest.mark.parametrize("keep", [0.5, 0.1, 0.03])
@pytest.mark.parametrize("s, d", [(1024, 128), (1000, 64), (777, 128)])
def test_random_block_sparsity(keep, s, d, path):
    q, k, v = fresh(2, 4, s, d), fresh(2, 4, s, d), fresh(2, 4, s, d)
    check(q, k, v, random_lists(2, 4, s, s, keep))


@pytest.mark.parametrize("keep", [0.5, 0.05])
def test_more_tiles_than_sms(keep, path):
    """More tiles (2 x 8 x 33) than SMs, rows of uneven length, GQA; then causal blocks under
    the causal element mask."""
    s, d = 4200, 128
    q = fresh(2, 8, s, d)
    k, v = fresh(2, 2, s, d), fresh(2, 2, s, d)
    check(q, k, v, random_lists(2, 8, s, s, keep))
    causal = create_block_mask(lambda b, h, q_idx, kv: q_idx >= kv, B=None, H=None, Q_LEN=s,
                               KV_LEN=s, device="cuda")
    check(q, k, v, causal, mask=masks.causal())


@pytest.mark.parametrize("mask, fn", [
    (masks.causal(), lambda b, h, q, kv: q >= kv),
    (masks.sliding_window(300), lambda b, h, q, kv: (q >= kv) & (q - kv < 300)),
    (masks.prefix_lm(200), lambda b, h, q, kv: (kv < 200) | (q >= kv)),
])
@pytest.mark.parametrize("d", [64, 128])
def test_builtin_masks_against_flex(mask, fn, d, path):
    from torch.nn.attention.flex_attention import flex_attention

    s = 1111
    q, k, v = fresh(1, 4, s, d), fresh(1, 2, s, d), fresh(1, 2, s, d)  # GQA
    block_mask = create_block_mask(fn, B=None, H=None, Q_LEN=s, KV_LEN=s, device="cuda")
    o = check(q, k, v, block_mask, mask=mask)
    flex = torch.compile(flex_attention)(q, k, v, block_mask=block_mask, enable_gqa=True)
    want, _ = bs.block_sparse_attention_reference(q, k, v, block_mask, mask=mask)
    ours_err = (o.float() - want).abs().max().item()
    flex_err = (flex.float() - want).abs().max().item()
    assert ours_err <= 2 * flex_err + 1e-3, (ours_err, flex_err)


def test_document_mask_uneven_segments(path):
    s = 1000
    doc = torch.tensor([[0] * 130 + [1] * 600 + [2] * 270, [0] * 7 + [1] * 993],
                       dtype=torch.int32, device="cuda")
    dense = (doc[:, None, :, None] == doc[:, None, None, :]).expand(2, 2, s, s)
    q, k, v = fresh(2, 2, s, 128), fresh(2, 2, s, 128), fresh(2, 2, s, 128)
    check(q, k, v, bs.block_mask_from_dense(dense), mask=masks.document(), doc_ids=doc)


def test_custom_cute_mask(path):
    import cutlass.cute as cute

    @cute.jit
    def band(b, h, q, kv):
        return kv + 200 >= q

    def band_torch(b, h, q, kv):
        return kv + 200 >= q

    s = 900
    q, k, v = fresh(1, 2, s, 64), fresh(1, 2, s, 64), fresh(1, 2, s, 64)
    block_mask = create_block_mask(band_torch, B=None, H=None, Q_LEN=s, KV_LEN=s,
                                   device="cuda")
    check(q, k, v, block_mask, mask=masks.custom(band, torch_fn=band_torch))


def test_empty_rows_give_zeros_and_minus_inf(path):
    s = 640
    q, k, v = fresh(1, 2, s, 128), fresh(1, 2, s, 128), fresh(1, 2, s, 128)
    counts, indices, full_counts, full_indices = random_lists(1, 2, s, s, 0.5)
    counts[:, :, 2] = 0
    full_counts[:, :, 2] = 0
    o, lse = bs.block_sparse_attention(q, k, v, (counts, indices, full_counts, full_indices),
                                       return_lse=True)
    assert bool((o[:, :, 256:384] == 0).all())
    assert bool((lse[:, :, 256:384] == -torch.inf).all())


def test_strided_inputs_and_different_lengths(path):
    base = fresh(1, 900, 4, 128)  # (B, S, H, D) storage
    q = base.transpose(1, 2)
    kv = fresh(1, 1300, 2, 128).transpose(1, 2)
    check(q, kv, kv, random_lists(1, 4, 900, 1300, 0.3))


@pytest.mark.parametrize("q_block, kv_block, keep", [(128, 32, 0.07), (128, 16, 0.3),
                                                     (64, 64, 0.1), (128, 64, 0.5)])
def test_packed_small_blocks(q_block, kv_block, keep, path):
    """Key blocks below 128 run packed through the column-sparse gather kernels."""
    s_q, s_kv = 1000, 1234
    m, n = -(-s_q // q_block), -(-s_kv // kv_block)
    on = torch.rand(2, 2, m, n, device="cuda") < keep
    order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    lists = (torch.zeros(2, 2, m, dtype=torch.int32, device="cuda"), order,
             on.sum(-1).to(torch.int32), order)
    q, k, v = fresh(2, 2, s_q, 128), fresh(2, 2, s_kv, 128), fresh(2, 2, s_kv, 128)
    check(q, k, v, lists, block_size=(q_block, kv_block))


@pytest.mark.parametrize("q_block, kv_block", [(128, 32), (64, 16), (128, 64)])
@pytest.mark.parametrize("in_kernel", [True, False])
@pytest.mark.parametrize("residue", [0, 7])
def test_packed_blocks_expanded_in_the_kernels(q_block, kv_block, in_kernel, residue, path,
                                               monkeypatch):
    """Both expansions of packed blocks (``PACKED_EXPANSION_IN_KERNEL``): the gather kernels
    take the merged block lists and expand them (no sync, no ``packed_rows``), or the host
    expands them into key rows (``packed_rows``); partial and full lists both in use, S_kv a
    multiple of the key block or ending 7 keys short of one (the residue block listed
    everywhere: last in each list, the count cut at S_kv; its TMA box reaches past K)."""
    monkeypatch.setattr(bs, "PACKED_EXPANSION_IN_KERNEL", in_kernel)
    if in_kernel:
        def no_host_expansion(*args):
            raise AssertionError("packed_rows ran on the in-kernel route")

        monkeypatch.setattr(bs, "packed_rows", no_host_expansion)
    s_q, s_kv = 1000, 40 * kv_block - residue
    m, n = -(-s_q // q_block), -(-s_kv // kv_block)
    on = torch.rand(2, 4, m, n, device="cuda") < 0.3
    on[..., n - 1] = True
    full = on & (torch.rand(2, 4, m, n, device="cuda") < 0.5)

    q, k, v = fresh(2, 4, s_q, 128), fresh(2, 2, s_kv, 128), fresh(2, 2, s_kv, 128)
    block_lists = (*block_list(on & ~full), *block_list(full))
    check(q, k, v, block_lists, block_size=(q_block, kv_block))


@pytest.mark.parametrize("block_size", [(128, 128), (64, 128), (128, 32)])
def test_full_blocks_are_entirely_visible_under_a_mask(block_size, path):
    """Hand-made lists whose full blocks the mask would cut (above the causal diagonal, the
    S_kv residue block among them): full blocks are seen whole, whatever ``mask`` says, and
    only the partial ones are masked (FlexAttention's semantics, the reference's)."""
    s = 1000
    m, n = -(-s // block_size[0]), -(-s // block_size[1])
    on = torch.rand(1, 4, m, n, device="cuda") < 0.5
    on[..., n - 1] = True
    full = on & (torch.rand(1, 4, m, n, device="cuda") < 0.5)
    full[..., n - 1] = True  # the residue block, full for every query block
    q, k, v = fresh(1, 4, s, 128), fresh(1, 2, s, 128), fresh(1, 2, s, 128)
    check(q, k, v, (*block_list(on & ~full), *block_list(full)), mask=masks.causal(),
          block_size=block_size)


WINDOW = 300
PACKED_MASKS = {
    "causal": (masks.causal(), lambda b, h, q, kv: q >= kv),
    "window": (masks.sliding_window(WINDOW), lambda b, h, q, kv: (q >= kv) & (q - kv < WINDOW)),
    "prefix": (masks.prefix_lm(200), lambda b, h, q, kv: (kv < 200) | (q >= kv)),
}


@pytest.mark.parametrize("q_block, kv_block, s", [
    (128, 32, 1000), (128, 32, 2100), (128, 16, 2100), (128, 64, 777), (64, 32, 1000),
    (64, 16, 1536)])
@pytest.mark.parametrize("name", ["causal", "window", "prefix"])
def test_packed_small_blocks_under_element_masks(q_block, kv_block, s, name, path):
    """Small key blocks with partial blocks under the built-in masks (FlexAttention's own
    BlockMask at that block size): S_kv ending inside a block (the residue block listed
    anywhere, its keys past S_kv hidden) or not, short lists (Hopper's 128 x 64 tiles) and
    long ones (128 x 128), 64-row query blocks (the FA2 gather kernel), GQA."""
    mask, fn = PACKED_MASKS[name]
    q, k, v = fresh(1, 4, s, 128), fresh(1, 2, s, 128), fresh(1, 2, s, 128)
    block_mask = create_block_mask(fn, B=None, H=None, Q_LEN=s, KV_LEN=s, device="cuda",
                                   BLOCK_SIZE=(q_block, kv_block))
    assert int(block_mask.kv_num_blocks.sum()) > 0  # partial blocks under the mask
    check(q, k, v, block_mask, mask=mask)


@pytest.mark.parametrize("kv_block, s", [(32, 1000), (16, 1024)])
def test_packed_small_blocks_document_and_custom_masks(kv_block, s, path):
    """Document ids with uneven segments (a dense mask's lists) and a traced CuTe mask on
    packed blocks, two batches whose documents differ."""
    import cutlass.cute as cute

    doc = torch.tensor([[0] * 130 + [1] * 600 + [2] * (s - 730), [0] * 7 + [1] * (s - 7)],
                       dtype=torch.int32, device="cuda")
    dense = (doc[:, None, :, None] == doc[:, None, None, :]).expand(2, 2, s, s)
    q, k, v = fresh(2, 2, s, 128), fresh(2, 2, s, 128), fresh(2, 2, s, 128)
    check(q, k, v, bs.block_mask_from_dense(dense, (128, kv_block)), mask=masks.document(),
          doc_ids=doc, block_size=(128, kv_block))

    @cute.jit
    def band(b, h, q, kv):
        return kv + 100 >= q

    def band_torch(b, h, q, kv):
        return kv + 100 >= q

    block_mask = create_block_mask(band_torch, B=None, H=None, Q_LEN=s, KV_LEN=s,
                                   device="cuda", BLOCK_SIZE=(128, kv_block))
    check(q, k, v, block_mask, mask=masks.custom(band, torch_fn=band_torch))


def test_packed_masked_partial_and_full_blocks_anywhere(path):
    """Hand-built lists of 32-key blocks: random partial and full blocks in random order under
    the causal mask (partial blocks above the diagonal hide everything, rows left without a
    key give o = 0), S_kv ending inside a block."""
    s, kv_block = 1000, 32
    m, n = -(-s // 128), -(-s // kv_block)
    on = torch.rand(2, 4, m, n, device="cuda") < 0.4
    on[:, :, 1] = False  # empty rows
    full = on & (torch.rand(2, 4, m, n, device="cuda") < 0.5)
    perm = torch.argsort(torch.rand(2, 4, m, n, device="cuda"), dim=-1)

    def shuffled(sel):
        counts, order = block_list(sel.gather(-1, perm))
        return counts, perm.gather(-1, order.long()).to(torch.int32)

    q, k, v = fresh(2, 4, s, 128), fresh(2, 2, s, 128), fresh(2, 2, s, 128)
    o = check(q, k, v, (*shuffled(on & ~full), *shuffled(full)), mask=masks.causal(),
              block_size=(128, kv_block))
    assert bool((o[:, :, 128:256] == 0).all())


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the Hopper gather tiles' choice)")
def test_a_reused_masked_packed_mask_runs_host_dealt_walks(monkeypatch):
    """A sliding-window BlockMask of 32-key blocks on more 128-row tiles than a wave of CTAs:
    the first call runs the ordered grid, the later ones persistent CTAs on walks dealt on the
    host, all under the element mask against the float32 reference."""
    import cute_kernels.ops.column_sparse as cs

    seen = []
    schedule = cs._gather_schedule
    monkeypatch.setattr(cs, "_gather_schedule",
                        lambda *a, **kw: seen.append(a[5]) or schedule(*a, **kw))
    s = 4000
    mask, fn = PACKED_MASKS["window"]
    block_mask = create_block_mask(fn, B=2, H=8, Q_LEN=s, KV_LEN=s, device="cuda",
                                   BLOCK_SIZE=(128, 32))
    q, k, v = fresh(2, 8, s, 128), fresh(2, 4, s, 128), fresh(2, 4, s, 128)
    for _ in range(3):
        check(q, k, v, block_mask, mask=mask)
    assert seen == [False, True, True], seen


@pytest.mark.parametrize("kv_block", [128, 32])
def test_a_reused_mask_is_converted_once_and_in_place_edits_are_seen(kv_block, path,
                                                                    monkeypatch):
    """The op keeps a mask's converted lists while its tensors are the same unchanged objects
    (ops/derived.py): a second call converts nothing; an in-place edit of the lists (empty
    rows now) or an equal copy is converted again, and the result follows the edit."""
    s = 40 * kv_block + 7 if kv_block == 128 else 40 * kv_block
    m, n = -(-s // 128), -(-s // kv_block)
    on = torch.rand(1, 2, m, n, device="cuda") < 0.4
    on[..., 0] = True
    order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    lists = (torch.zeros(1, 2, m, dtype=torch.int32, device="cuda"), order,
             on.sum(-1).to(torch.int32), order)
    q, k, v = fresh(1, 2, s, 64), fresh(1, 2, s, 64), fresh(1, 2, s, 64)
    calls = []
    convert = bs.block_lists
    monkeypatch.setattr(bs, "block_lists", lambda *a, **kw: calls.append(1) or convert(*a, **kw))
    check(q, k, v, lists, block_size=(128, kv_block))
    first = len(calls)  # the op's conversion (and the reference's)
    bs.block_sparse_attention(q, k, v, lists, block_size=(128, kv_block))
    assert len(calls) == first, "a reused, unchanged mask was converted again"
    lists[2][:, 1] = 0  # head 1: no blocks (in place: the version counter moves)
    o = check(q, k, v, lists, block_size=(128, kv_block))
    assert bool((o[:, 1] == 0).all()) and not bool((o[:, 0] == 0).all())
    before = len(calls)
    check(q, k, v, tuple(t.clone() for t in lists), block_size=(128, kv_block))
    assert len(calls) > before + 1  # an equal copy is another mask


@pytest.mark.skipif(not torch.cuda.is_available()
                    or torch.cuda.get_device_capability() != (9, 0),
                    reason="needs an sm_90 GPU (the Hopper gather tiles' choice)")
def test_a_reused_mask_takes_the_short_list_tiles(monkeypatch):
    """Packed 32-key lists averaging far below 1,024 keys: the first call of a mask runs the
    default gather tiles without a sync, the second the short-list tiles (128 x 64, the
    consumers taking turns, on walks dealt on the host: the lists' mean read back once); both
    against the float32 reference, partial and full lists."""
    import cute_kernels.ops.column_sparse as cs

    chosen = []
    tiling = cs._gather_tiling
    monkeypatch.setattr(cs, "_gather_tiling",
                        lambda *a: chosen.append(tiling(*a)[2]) or tiling(*a))
    s = 64 * 32
    m, n = s // 128, s // 32
    on = torch.rand(2, 4, m, n, device="cuda") < 0.2
    on[..., 0] = True
    full = on & (torch.rand(2, 4, m, n, device="cuda") < 0.5)

    block_lists = (*block_list(on & ~full), *block_list(full))
    q, k, v = fresh(2, 4, s, 128), fresh(2, 2, s, 128), fresh(2, 2, s, 128)
    check(q, k, v, block_lists, block_size=(128, 32))
    first = len(chosen)
    check(q, k, v, block_lists, block_size=(128, 32))
    # (the second call asks twice: for its walks, ``packed_walks``, and for its tiles)
    assert chosen[:first] == [False] and set(chosen[first:]) == {True}, chosen


def test_bad_list_values_are_clamped_not_read_out_of_bounds(path):
    """Without debug mode the lists' values are not checked (that needs a device sync): the
    kernels clamp counts to the list width and blocks into the key range, so garbage gives
    finite numbers and never an illegal access; debug mode names the problem."""
    s = 777
    q, k, v = fresh(1, 2, s, 128), fresh(1, 2, s, 128), fresh(1, 2, s, 128)
    garbage = torch.randint(-50, 50, (1, 2, 7, 3), dtype=torch.int32, device="cuda")
    zeros = torch.zeros(1, 2, 7, dtype=torch.int32, device="cuda")
    lists = (zeros + 99, garbage, zeros - 5, garbage)
    o = bs.block_sparse_attention(q, k, v, lists)
    torch.cuda.synchronize()
    assert bool(torch.isfinite(o.float()).all())
    with pytest.raises(ValueError, match="kv_num_blocks must be in"):
        bs.block_sparse_attention(q, k, v, lists, validate=True)


@pytest.mark.parametrize("d", [64, 128])
def test_64_row_query_blocks(d, path):
    from torch.nn.attention.flex_attention import flex_attention

    s = 1000
    q, k, v = fresh(1, 2, s, d), fresh(1, 2, s, d), fresh(1, 2, s, d)

    def window(b, h, q, kv):
        return (q >= kv) & (q - kv < 200)

    block_mask = create_block_mask(window, B=None, H=None, Q_LEN=s, KV_LEN=s, device="cuda",
                                   BLOCK_SIZE=(64, 128))
    o = check(q, k, v, block_mask, mask=masks.sliding_window(200))
    # Compiled flex needs blocks that are multiples of its own tile (64-row query blocks fail
    # to lower at D = 64): it gets the same element mask on 128-blocks.
    flex_mask = create_block_mask(window, B=None, H=None, Q_LEN=s, KV_LEN=s, device="cuda")
    flex = torch.compile(flex_attention)(q, k, v, block_mask=flex_mask)
    assert (o.float() - flex.float()).abs().max().item() < 3e-2


def _packed_launch(q, k, v, block_lists, kv_block, config, persistent):
    """The Hopper gather kernel of ``config`` (``hopper_gather_config`` overrides) on the
    packed lists of ``block_lists`` (the op's ``packed_entries``): o, poisoned first."""
    from cute_kernels.ops.attention import attention_params
    from cute_kernels.ops.column_sparse import _gather_schedule, make_build
    from cute_kernels.runtime.arch import sm_count
    from cute_kernels.runtime.compile import compile_build

    b, h, s_q, d = q.shape
    s_kv = k.shape[2]
    entries, counts = bs.packed_entries(bs.block_lists(block_lists, b, h, s_q, s_kv,
                                                       (128, kv_block)), s_kv)
    kernel = compile_build(make_build("hopper", BF, d, 128, False, config=config,
                                      entry_keys=kv_block, ordered=not persistent,
                                      persistent=persistent), "sm_90a")
    tiles = b * h * -(-s_q // config["block_m"])
    wave = sm_count(q.device) * config.get("ctas_per_sm", 1)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, s_q), float("nan"), device="cuda")
    kernel(*attention_params().call_args(
        mQ=q, mK=k, mV=v, mO=o, mLSE=lse, mPrevLSE=None, mColsum=None, mIndices=entries,
        mCounts=counts, scale=d ** -0.5, out_scale=None,
        **_gather_schedule(counts, s_q, config["block_m"], 128, not persistent, persistent,
                           wave, tiles)))
    return o


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the Hopper gather loaders)")
@pytest.mark.parametrize("kv_block, loader, tiles", [
    (16, "tma", "short"), (32, "tma", "short"), (64, "tma", "short"), (32, "tma", "persistent"),
    (32, "tma", "long"), (16, "tma", "long"), (32, "gather", "short"), (32, "gather", "long"),
    (32, "tma", "two-ctas")])
def test_packed_block_loaders(kv_block, loader, tiles):
    """Both K/V loaders of packed key blocks, each tile choice: one TMA box per listed block
    (``gather_tma``) and the row gather; the short lists' 128 x 64 tiles with turns (on the
    ordered grid or persistent), 64 x 64 tiles at two CTAs per SM (``SHORT_PACKED_TURNS``
    off) and the 128 x 128 tiles. More query tiles than CTAs, uneven rows (some empty), GQA,
    partial and full lists, against the float32 reference."""
    from cute_kernels.tuning.attention import hopper_gather_config

    config = hopper_gather_config(128, 128, short=tiles != "long",
                                  persistent=tiles == "persistent", entry_keys=kv_block)
    if tiles == "two-ctas":
        config = dict(block_m=64, block_n=64, gather=True, group=128, overlap=True,
                      ctas_per_sm=2, gather_tma=True)
    assert config.get("gather_tma", False) is True
    if loader == "gather":
        del config["gather_tma"]
    s_q, s_kv = 2000, 48 * kv_block
    m, n = -(-s_q // 128), s_kv // kv_block
    keep = torch.rand(2, 4, m, 1, device="cuda") * 0.5  # uneven rows
    on = torch.rand(2, 4, m, n, device="cuda") < keep
    on[:, :, 3] = False  # empty rows: o = 0
    full = on & (torch.rand(2, 4, m, n, device="cuda") < 0.5)

    block_lists = (*block_list(on & ~full), *block_list(full))
    q, k, v = fresh(2, 4, s_q, 128), fresh(2, 2, s_kv, 128), fresh(2, 2, s_kv, 128)
    o = _packed_launch(q, k, v, block_lists, kv_block, config, tiles == "persistent")
    want, _ = bs.block_sparse_attention_reference(q, k, v, block_lists,
                                                  block_size=(128, kv_block))
    err = (o.float() - want).abs().max().item()
    assert err < 2e-2, err


@pytest.mark.parametrize("kv_block", [16, 64])
def test_bad_packed_list_values_are_clamped(kv_block, path):
    """Garbage packed lists (blocks out of range, counts past the width) take the in-kernel
    expansion (TMA block loads on Hopper): clamped, finite, no illegal access."""
    s = 40 * kv_block
    q, k, v = fresh(1, 2, s, 128), fresh(1, 2, s, 128), fresh(1, 2, s, 128)
    garbage = torch.randint(-500, 500, (1, 2, -(-s // 128), 9), dtype=torch.int32,
                            device="cuda")
    zeros = torch.zeros(1, 2, -(-s // 128), dtype=torch.int32, device="cuda")
    o = bs.block_sparse_attention(q, k, v, (zeros + 99, garbage, zeros - 5, garbage),
                                  block_size=(128, kv_block))
    torch.cuda.synchronize()
    assert bool(torch.isfinite(o.float()).all())


@pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU (the Hopper gather tiles' choice)")
def test_a_reused_packed_mask_runs_host_dealt_walks(monkeypatch):
    """Short packed lists on more 128-row tiles than a wave of CTAs: the mask's first call runs
    the ordered grid (no sync), the second reads the counts back once and runs persistent CTAs
    on walks dealt on the host (``column_sparse.packed_walks``), the third reuses them; all
    against the float32 reference, partial and full lists, GQA."""
    import cute_kernels.ops.column_sparse as cs
    from cute_kernels.runtime.arch import sm_count

    seen = []
    schedule = cs._gather_schedule
    monkeypatch.setattr(cs, "_gather_schedule",
                        lambda *a, **kw: seen.append((a[5], a[8] if len(a) > 8 else None))
                        or schedule(*a, **kw))
    s = 128 * 32
    m, n = s // 128, s // 32
    on = torch.rand(2, 8, m, n, device="cuda") < torch.rand(2, 8, m, 1, device="cuda") * 0.4
    on[..., 0] = True
    full = on & (torch.rand(2, 8, m, n, device="cuda") < 0.5)

    block_lists = (*block_list(on & ~full), *block_list(full))
    q, k, v = fresh(2, 8, s, 128), fresh(2, 4, s, 128), fresh(2, 4, s, 128)
    for _ in range(3):
        check(q, k, v, block_lists, block_size=(128, 32))
    assert [p for p, _ in seen] == [False, True, True], seen
    first, again = seen[1][1], seen[2][1]
    assert first is not None and again is first  # dealt once, kept with the mask
    # CSR: one offset per CTA (one per SM) and the end, then every 128-row tile
    tiles = 2 * 8 * (s // 128)
    assert first.numel() == min(sm_count(q.device), tiles) + 1 + tiles
