"""The torch references (test oracle and baseline) against numpy's packbits."""

import numpy as np
import pytest
import torch

from cute_kernels.ops.bitpack import pack_mask_reference, unpack_mask_reference


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 17), (2, 3, 64), (2, 2, 2, 9)])
def test_reference_matches_numpy(shape):
    g = torch.Generator().manual_seed(hash(shape) % 2**31)
    mask = torch.rand(shape, generator=g) < 0.5
    packed = pack_mask_reference(mask)
    expect = np.packbits(mask.numpy(), axis=-1, bitorder="little")
    assert np.array_equal(packed.numpy(), expect)
    assert torch.equal(unpack_mask_reference(packed, shape[-1]), mask)
