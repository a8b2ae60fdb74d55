"""Run block-sparse attention once per element mask and on random block lists (for
compute-sanitizer): python perf/block_sparse_probe.py [hopper|ampere]"""

import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask

import cute_kernels as ck
from cute_kernels import masks
from cute_kernels.ops.block_sparse import block_sparse_attention

path = sys.argv[1] if len(sys.argv) > 1 else None
s, d = 777, 128
q, k, v = (torch.randn(1, 2, s, d, device="cuda").bfloat16() for _ in "qkv")
doc = torch.tensor([[0] * 300 + [1] * 477], dtype=torch.int32, device="cuda")
with ck.force_path(path):
    causal = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, s, s, device="cuda")
    block_sparse_attention(q, k, v, causal, mask=masks.causal())
    dense_doc = (doc[:, None, :, None] == doc[:, None, None, :]).expand(1, 2, s, s)
    from cute_kernels.ops.block_sparse import block_mask_from_dense

    block_sparse_attention(q, k, v, block_mask_from_dense(dense_doc), mask=masks.document(),
                           doc_ids=doc)
    on = torch.rand(1, 2, 7, 7, device="cuda") < 0.4
    order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    zeros = torch.zeros(1, 2, 7, dtype=torch.int32, device="cuda")
    block_sparse_attention(q, k, v, (zeros, order, on.sum(-1).to(torch.int32), order))
    # bad values without debug mode: clamped by the kernels, never an out-of-bounds access
    garbage = torch.randint(-50, 50, (1, 2, 7, 3), dtype=torch.int32, device="cuda")
    block_sparse_attention(q, k, v, (zeros + 99, garbage, zeros - 5, garbage))
    # more tiles (280) than SMs, uneven rows, GQA
    q40 = torch.randn(1, 40, s, d, device="cuda").bfloat16()
    on = torch.rand(1, 40, 7, 7, device="cuda") < 0.5
    order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    block_sparse_attention(q40, k, v, (on.sum(-1).to(torch.int32), order,
                                       on.sum(-1).to(torch.int32).flip(-1), order))
    # packed small key blocks (S_kv a multiple of the block: expanded in the kernels; TMA
    # block loads on Hopper), with garbage lists too; 96 heads: more tiles than CTAs, and a
    # reused mask's second call runs the persistent walks dealt on the host
    s2 = 32 * 24
    q2, k2, v2 = (torch.randn(1, 96, s2, d, device="cuda").bfloat16() for _ in "qkv")
    for e in (16, 32, 64):
        m, n = -(-s2 // 128), s2 // e
        on = torch.rand(1, 96, m, n, device="cuda") < 0.3
        order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        zeros = torch.zeros(1, 96, m, dtype=torch.int32, device="cuda")
        reused = (zeros, order, on.sum(-1).to(torch.int32), order)
        for _ in range(2):
            block_sparse_attention(q2, k2, v2, reused, block_size=(128, e))
        bad = torch.randint(-500, 500, (1, 96, m, 5), dtype=torch.int32, device="cuda")
        block_sparse_attention(q2, k2, v2, (zeros + 99, bad, zeros - 5, bad),
                               block_size=(128, e))
    # packed small key blocks under element masks: S_kv ending inside a block (the residue
    # block's box reaches past the keys), 64-row query blocks, documents; a causal mask of
    # 32-key blocks on 96 heads reused, so its second call runs persistent walks
    for (qb, e), mask, fn in (((128, 32), masks.causal(), lambda b, h, q, kv: q >= kv),
                              ((64, 16), masks.sliding_window(100),
                               lambda b, h, q, kv: (q >= kv) & (q - kv < 100))):
        bm = create_block_mask(fn, None, None, s, s, device="cuda", BLOCK_SIZE=(qb, e))
        block_sparse_attention(q, k, v, bm, mask=mask)
    block_sparse_attention(q, k, v, block_mask_from_dense(dense_doc, (128, 16)),
                           mask=masks.document(), doc_ids=doc, block_size=(128, 16))
    # unmasked 32-key blocks with S_kv ending inside one: the residue block's box reaches past K
    n = -(-s // 32)
    on = torch.rand(1, 2, -(-s // 128), n, device="cuda") < 0.4
    on[..., n - 1] = True
    order = torch.argsort((~on).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    zeros = torch.zeros(1, 2, -(-s // 128), dtype=torch.int32, device="cuda")
    block_sparse_attention(q, k, v, (zeros, order, on.sum(-1).to(torch.int32), order),
                           block_size=(128, 32))
    causal96 = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, s2, s2,
                                 device="cuda", BLOCK_SIZE=(128, 32))
    for _ in range(2):
        block_sparse_attention(q2, k2, v2, causal96, mask=masks.causal())
torch.cuda.synchronize()
print("ok")
