"""The column-lists kernel (kernels/column_lists.py) on the GPU against column_indices'
reference: random packed masks at several densities, empty and full rows, odd widths (byte
loads) and 16-byte rows, multiple_of padding, poisoned outputs, both kernel paths; then
``column_indices`` itself on CUDA (the kernel's user: bool masks packed by ``pack_mask``,
bitpacked masks as given), exactly the reference."""

import os

import numpy as np
import pytest
import torch
from gpu_paths import PATHS  # tests/ is on pytest's path

import cute_kernels as ck
from cute_kernels.ops import column_sparse as cs
from cute_kernels.ops.column_lists import (
    COLUMN_LISTS_KERNEL,
    column_counts,
    column_lists,
    make_build,
    word_loads,
)
from cute_kernels.ops.column_sparse import column_indices_reference

pytestmark = pytest.mark.gpu

POISON = -7


def random_mask(r, n, density):
    g = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    mask = torch.rand(r, n, generator=g, device="cuda") < density
    mask[0] = False          # an empty row
    if r > 1:
        mask[1] = True       # a full row
    return mask


def packed_and_counts(mask):
    packed = torch.from_numpy(np.packbits(mask.cpu().numpy(), axis=-1, bitorder="little"))
    return packed.cuda(), mask.sum(1).to(torch.int32)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("r, n, density, multiple", [(7, 1000, 0.07, 1), (9, 4096, 0.3, 64),
                                                     (5, 118784, 0.07, 128), (3, 777, 0.5, 1),
                                                     (4, 8, 0.5, 1), (6, 32768 + 128, 0.01, 64),
                                                     (67, 20000, 0.9, 1), (10, 9000, 0.5, 4096)])
def test_lists_match_the_reference(path, r, n, density, multiple):
    mask = random_mask(r, n, density)
    want, _ = column_indices_reference(mask, group=128, multiple_of=multiple)
    packed, counts = packed_and_counts(mask)
    with ck.force_path(path):
        got = column_lists(packed, counts, n, want.shape[1])
    assert torch.equal(got, want.cuda())


@pytest.mark.parametrize("path", PATHS)
def test_kernel_writes_every_entry(path):
    """Through the compiled kernel into a poisoned list: every entry written, both widths."""
    from cute_kernels.runtime.bridge import kernel_for
    from cute_kernels.runtime.launch import kernel_params

    for n in (4096, 1001):
        mask = random_mask(6, n, 0.1)
        want, _ = column_indices_reference(mask, group=128, multiple_of=256)
        packed, counts = packed_and_counts(mask)
        words = word_loads(packed)
        assert words == (n % 32 == 0)
        out = torch.full(tuple(want.shape), POISON, dtype=torch.int32, device="cuda")
        with ck.force_path(path):
            kernel = kernel_for(packed.device, ("test-column-lists", words),
                                lambda p, t, words=words: make_build("lists", words))
            kernel(*kernel_params(COLUMN_LISTS_KERNEL).call_args(
                mPacked=packed, mCounts=counts, mIndices=out, n=n))
        torch.cuda.synchronize()
        assert torch.equal(out, want.cuda())


def test_strided_rows_take_byte_loads():
    mask = random_mask(8, 4096, 0.2)
    packed, counts = packed_and_counts(mask)
    wide = torch.zeros(8, 600, dtype=torch.uint8, device="cuda")
    wide[:, 3:515] = packed
    view = wide[:, 3:515]
    assert not word_loads(view)
    want, _ = column_indices_reference(mask, group=128)
    assert torch.equal(column_lists(view, counts, 4096, want.shape[1]), want.cuda())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("r, n, multiple", [(7, 1000, 1), (9, 4096, 64), (5, 118784, 128),
                                            (11, 777, 5), (1, 8, 3), (13, 32768 + 136, 64)])
def test_counts_match_torch(path, r, n, multiple):
    """ColumnCounts: each row's set bits, padded to ``multiple`` and capped at n, and the
    largest padded count, into poisoned outputs; junk bits past n are ignored."""
    mask = random_mask(r, n, 0.2)
    packed, counts = packed_and_counts(mask)
    if n % 8:
        packed[:, -1] |= (0xFF << (n % 8)) & 0xFF
    padded = ((counts + multiple - 1) // multiple * multiple).clamp(max=n)
    with ck.force_path(path):
        got_counts, got_padded, largest = column_counts(packed, n, multiple)
    assert torch.equal(got_counts, counts) and torch.equal(got_padded, padded)
    assert int(largest) == int(padded.max())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("multiple", [1, 128])
@pytest.mark.parametrize("n", [13, 1001, 4093, 40965])
def test_column_indices_on_cuda(path, n, multiple):
    """``column_indices`` on CUDA (the kernel route) from a bool mask (B, H, G, n) with random
    row densities (an empty and a full row), a transposed one, its bitpacked form with junk
    bits past n and as a strided byte view, and an empty and a 1-D mask: exactly
    ``column_indices_reference`` (on the CPU) and the torch compaction (``column_indices`` on
    the CPU). n is odd: 1001 has an even byte count (16-bit popcount words), 4093 512 bytes
    per row (16-byte loads), 13 and 40965 odd byte counts."""
    g = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    density = torch.rand(2, 3, 5, 1, generator=g, device="cuda")
    mask = torch.rand(2, 3, 5, n, generator=g, device="cuda") < density
    mask[0, 0, 0] = False
    mask[0, 0, 1] = True
    packed = ck.pack_mask(mask)
    junk = packed.clone()
    junk[..., -1] |= (0xFF << (n % 8)) & 0xFF
    wide = torch.zeros(*packed.shape[:-1], packed.shape[-1] + 1, dtype=torch.uint8,
                       device="cuda")
    wide[..., 1:] = junk
    cases = [(mask, {}), (junk, {"n": n}), (wide[..., 1:], {"n": n}),
             (mask.transpose(0, 2), {}), (mask[1, 2, 3], {}), (mask[:, :, :0], {})]
    with ck.force_path(path):
        for m, kw in cases:
            cpu = m.cpu()
            want = column_indices_reference(cpu, group=128, multiple_of=multiple, **kw)
            torch_lists = cs.column_indices(cpu, group=128, multiple_of=multiple, **kw)
            got = cs.column_indices(m, group=128, multiple_of=multiple, **kw)
            assert got[0].is_cuda and got[0].dtype == got[1].dtype == torch.int32
            for expect in (want, torch_lists):
                assert got[0].shape == expect[0].shape and got[1].shape == expect[1].shape
                assert torch.equal(got[0].cpu(), expect[0])
                assert torch.equal(got[1].cpu(), expect[1])
