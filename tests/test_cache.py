"""The compile caches: keys are plain values; the disk cache survives processes and is safe
when several processes compile the same kernel at once."""

import json
import os
import subprocess
import sys

import pytest

from cute_kernels.runtime.compile import KernelCache

CHILD = r"""
import json, sys
from cute_kernels.ops.bitpack import make_build
from cute_kernels.runtime.compile import KernelCache
cache = KernelCache()
fn = cache.get(("test-cache", "pack_mask", "flat"), lambda: make_build("pack_mask", "flat"),
               "sm_90a")
assert callable(fn)
assert cache.get(("test-cache", "pack_mask", "flat"), None, "sm_90a") is fn  # memory hit
print(json.dumps(cache.stats))
"""


def _spawn(cache_dir):
    env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stats(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_disk_cache_concurrent_then_reused(tmp_path):
    racers = [_spawn(tmp_path), _spawn(tmp_path)]
    stats = [_stats(p) for p in racers]
    assert sum(s["compiles"] for s in stats) == 1, stats  # the lock let one process compile
    assert sum(s["disk_hits"] for s in stats) == 1, stats
    assert [p.name for p in tmp_path.glob("*.o")] and not list(tmp_path.glob(".*.o"))
    later = _stats(_spawn(tmp_path))
    assert later["compiles"] == 0 and later["disk_hits"] == 1


def test_key_must_be_hashable():
    with pytest.raises(TypeError):
        KernelCache().get(("pack_mask", ["not", "hashable"]), None, "sm_90a")
