"""ops/derived.py: results derived from tensors are reused only for the very same, unchanged
tensor objects (CPU tensors here; the ops use it with CUDA ones, keyed on the stream too)."""

import torch

from cute_kernels.ops.derived import DerivedCache


def counting(fn):
    calls = []

    def run():
        calls.append(1)
        return fn()
    return run, calls


def test_same_unchanged_tensors_hit():
    cache = DerivedCache()
    a, b = torch.arange(6), torch.ones(3)
    run, calls = counting(lambda: a.sum() + b.sum())
    first = cache.get((a, None, b), "x", run)
    assert cache.get((a, None, b), "x", run) is first and len(calls) == 1
    cache.get((a, None, b), "y", run)  # another extra key
    assert len(calls) == 2


def test_in_place_writes_equal_copies_and_freed_tensors_miss():
    cache = DerivedCache()
    a = torch.arange(6)
    run, calls = counting(lambda: a.clone())
    cache.get((a,), 0, run)
    a.add_(1)  # bumps the version counter
    assert cache.get((a,), 0, run).tolist() == [1, 2, 3, 4, 5, 6] and len(calls) == 2
    twin = a.clone()  # equal values, another object
    cache.get((twin,), 0, lambda: calls.append(1))
    assert len(calls) == 3
    a.resize_(3)  # same object, new shape
    cache.get((a,), 0, run)
    assert len(calls) == 4


def test_least_recently_used_is_evicted_and_no_tensors_never_cache():
    cache = DerivedCache(size=2)
    ts = [torch.zeros(1) for _ in range(3)]
    calls = []
    for t in ts:
        cache.get((t,), 0, lambda: calls.append(1))
    cache.get((ts[0],), 0, lambda: calls.append(1))  # evicted by the third
    assert len(calls) == 4
    cache.get((ts[2],), 0, lambda: calls.append(1))  # still there
    assert len(calls) == 4
    cache.get((), 0, lambda: calls.append(1))
    cache.get((), 0, lambda: calls.append(1))
    assert len(calls) == 6
