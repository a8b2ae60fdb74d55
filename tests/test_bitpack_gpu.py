"""pack_mask / unpack_mask on the GPU against the torch reference: fresh random masks, poisoned
outputs, odd sizes, 1-D to 4-D, strided and misaligned inputs, both kernel paths."""

import os

import pytest
import torch
from gpu_paths import PATHS  # tests/ is on pytest's path

import cute_kernels as ck
from cute_kernels.ops.bitpack import pack_mask_reference

pytestmark = pytest.mark.gpu

POISON = 0xA5




def random_mask(shape, device="cuda"):
    """A fresh random mask with a random density (never all-false)."""
    seed = int.from_bytes(os.urandom(4), "little")
    g = torch.Generator(device=device).manual_seed(seed)
    density = torch.rand((), generator=g, device=device).item() * 0.8 + 0.1
    mask = torch.rand(shape, generator=g, device=device) < density
    mask.view(-1)[0] = True
    return mask, seed


def poisoned_packed(shape):
    return torch.full(shape, POISON, dtype=torch.uint8, device="cuda")


def poisoned_mask(shape):
    out = torch.empty(shape, dtype=torch.bool, device="cuda")
    out.view(torch.uint8).fill_(POISON)
    return out


def check_roundtrip(mask, seed):
    n = mask.shape[-1]
    expect = pack_mask_reference(mask)
    packed = poisoned_packed(expect.shape)
    ck.pack_mask(mask, out=packed)
    assert torch.equal(packed, expect), f"pack mismatch (seed {seed}, shape {tuple(mask.shape)})"
    assert torch.equal(ck.pack_mask(mask), expect)  # the allocating form too
    unpacked = poisoned_mask(mask.shape)
    ck.unpack_mask(packed, n, out=unpacked)
    raw = unpacked.view(torch.uint8)
    assert bool(((raw == 0) | (raw == 1)).all()), f"unpack left bytes unwritten (seed {seed})"
    assert torch.equal(unpacked, mask), f"unpack mismatch (seed {seed})"
    assert torch.equal(ck.unpack_mask(packed, n), mask)


SHAPES = [
    (1,), (7,), (8,), (16,), (24,), (1000,), (2**20 + 8,),  # 1-D, flat tails of 0 and 8 entries
    (3, 17), (5, 64), (1, 4104), (2049, 4096),  # 2-D, odd N and multi-CTA flat
    (4, 3, 129), (2, 3, 5, 40), (2, 1, 3, 1),  # 3-D and 4-D
    (70000, 9),  # more rows than one grid dimension holds
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_roundtrip_matches_reference(path, shape):
    with ck.force_path(path):
        check_roundtrip(*random_mask(shape))


def _strided_cases():
    def row_slice():
        base, seed = random_mask((300, 136))
        return base[:, :128], seed  # unit column stride, row stride 136: no copy

    def every_other_row():
        base, seed = random_mask((64, 2, 33))
        return base[:, 0], seed

    def transposed():
        base, seed = random_mask((40, 24))
        return base.t(), seed  # last-dim stride 40: copied once

    def misaligned():
        base, seed = random_mask((1 + 96 * 64,))
        return base[1:].view(96, 64), seed  # N % 8 == 0 but not 16-byte aligned

    def broadcast():
        base, seed = random_mask((1, 200))
        return base.expand(50, 200), seed  # row stride 0

    return {f.__name__: f for f in (row_slice, every_other_row, transposed, misaligned,
                                    broadcast)}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", list(_strided_cases()))
def test_strided_inputs(path, case):
    mask, seed = _strided_cases()[case]()
    assert not mask.is_contiguous() or mask.data_ptr() % 16
    with ck.force_path(path):
        check_roundtrip(mask, seed)


@pytest.mark.parametrize("path", PATHS)
def test_unpack_strided_packed_and_padding_bits(path):
    mask, seed = random_mask((33, 21))
    packed = pack_mask_reference(mask)
    assert bool(((packed[:, -1] >> 5) == 0).all())  # reference pads with zeros
    dirty = packed.clone()
    dirty[:, -1] |= 0xE0  # garbage in the 3 unused high bits of the last byte is ignored
    wide = torch.zeros(33, 7, dtype=torch.uint8, device="cuda")
    wide[:, :3] = dirty
    with ck.force_path(path):
        got = ck.unpack_mask(wide[:, :3], 21)  # non-contiguous packed input
        assert torch.equal(got, mask), f"seed {seed}"
        assert torch.equal(ck.pack_mask(mask), packed), f"padding bits not zero, seed {seed}"


def test_empty_and_degenerate():
    assert ck.pack_mask(torch.zeros(0, 9, dtype=torch.bool, device="cuda")).shape == (0, 2)
    assert ck.pack_mask(torch.zeros(4, 0, dtype=torch.bool, device="cuda")).shape == (4, 0)
    assert ck.unpack_mask(torch.zeros(3, 0, dtype=torch.uint8, device="cuda"), 0).shape == (3, 0)


def test_runs_on_current_stream():
    """The kernel must be ordered after work queued on torch's current stream."""
    src, seed = random_mask((4096, 4096))
    side = torch.cuda.Stream()
    mask = torch.zeros_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keep the side stream busy ~tens of ms
        mask.copy_(src)
        packed = ck.pack_mask(mask)
    side.synchronize()
    assert torch.equal(packed, pack_mask_reference(src)), f"seed {seed}"


def test_torch_compile_fullgraph():
    @torch.compile(fullgraph=True)
    def roundtrip(m):
        return ck.unpack_mask(ck.pack_mask(m), m.shape[-1])

    mask, seed = random_mask((37, 100))
    assert torch.equal(roundtrip(mask), mask), f"seed {seed}"


def test_out_validation_on_gpu():
    mask, _ = random_mask((4, 16))
    with pytest.raises(ValueError, match=r"out must have shape \(4, 2\)"):
        ck.pack_mask(mask, out=poisoned_packed((4, 3)))
    with pytest.raises(TypeError, match="out must have dtype uint8"):
        ck.pack_mask(mask, out=torch.empty(4, 2, dtype=torch.int8, device="cuda"))
    with pytest.raises(ValueError, match="out must be contiguous"):
        ck.unpack_mask(pack_mask_reference(mask), 16, out=poisoned_mask((16, 4)).t())


def test_compile_cache_is_reused():
    from cute_kernels.runtime.compile import KERNELS

    check_roundtrip(*random_mask((8, 64)))
    before = dict(KERNELS.stats)
    for shape in [(9, 64), (100, 8), (3, 1024)]:  # other sizes, same kernels
        check_roundtrip(*random_mask(shape))
    assert KERNELS.stats["compiles"] == before["compiles"]
    assert KERNELS.stats["disk_hits"] == before["disk_hits"]
