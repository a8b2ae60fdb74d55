"""CacheOffloader (issue 16) on the GPU: exact round trips through pinned memory with
prefetching one layer ahead, rewrites of a layer, a get without prefetch, and the CPU-side
errors."""

import pytest
import torch

from cute_kernels.offload import CacheOffloader

cuda = pytest.mark.gpu


@cuda
def test_round_trip_with_prefetch():
    off = CacheOffloader(ahead=2)
    layers = {i: torch.randn(257, 33 + i, device="cuda").bfloat16() for i in range(5)}
    for i, t in layers.items():
        off.put(i, t)
    assert off.host_bytes() == sum(t.numel() * 2 for t in layers.values())
    off.prefetch(0)
    for i in range(5):
        if i + 1 < 5:
            off.prefetch(i + 1)
        got = off.get(i)
        torch.cuda.current_stream().synchronize()
        assert torch.equal(got, layers[i])


@cuda
def test_rewrite_and_get_without_prefetch():
    off = CacheOffloader()
    a = torch.randn(1000, device="cuda")
    off.put("mask", a)
    off.prefetch("mask")
    b = a * 2 + 1
    off.put("mask", b)  # the prefetched copy of the old contents is dropped
    assert torch.equal(off.get("mask"), b)
    c = torch.randint(0, 255, (3, 7), dtype=torch.uint8, device="cuda")
    off.put("mask", c)  # a new shape and dtype: a new pinned buffer
    assert torch.equal(off.get("mask"), c)
    with pytest.raises(KeyError, match="no tensor was put"):
        off.get("other")
    with pytest.raises(ValueError, match="put takes a tensor on"):
        off.put("x", torch.zeros(3))


def test_needs_cuda_and_checks_arguments():
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="ahead must be"):
            CacheOffloader(ahead=0)
        with pytest.raises(ValueError, match="must be a CUDA device"):
            CacheOffloader("cpu")
    else:
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            CacheOffloader()
