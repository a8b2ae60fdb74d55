"""The compile caches: keys are plain values; the disk cache survives processes and is safe
when several processes compile the same kernel at once."""

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cute_kernels
import layouts
from cute_kernels.runtime.compile import TRACED_PACKAGES, KernelCache, traced_package_dirs

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
    assert _entries(tmp_path) and not list(tmp_path.glob(".*"))
    later = _stats(_spawn(tmp_path))
    assert later["compiles"] == 0 and later["disk_hits"] == 1


def _entries(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.suffix in (".so", ".o")]


WARM_CHILD = r"""
import json, sys
import torch  # loaded by every op anyway; the point is what the kernel load adds
from cute_kernels.runtime.compile import KernelCache
def no_build():
    raise AssertionError("a warm cache must not build")
fn = KernelCache().get(("test-cache", "pack_mask", "flat"), no_build, "sm_90a")
dsl = sorted(m for m in ("cutlass", "cutlass.cute") if m in sys.modules)
print(json.dumps({"type": type(fn).__module__ + "." + type(fn).__name__, "dsl_imported": dsl}))
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler driver (cc) to link with")
def test_warm_cache_loads_a_linked_library_without_the_dsl(tmp_path):
    """With a linker the entry is a shared library, and a later process loads it through
    TVM-FFI alone: importing the DSL would cost the warm first call ~0.5 s (issue 18)."""
    _stats(_spawn(tmp_path))
    assert [Path(n).suffix for n in _entries(tmp_path)] == [".so"]
    env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", WARM_CHILD], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"type": "tvm_ffi.core.Function", "dsl_imported": []}, got


def test_without_a_linker_the_entry_is_an_object_file(tmp_path):
    env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=str(tmp_path), CC="no-such-compiler-ck")
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert _stats(proc)["compiles"] == 1
    assert [Path(n).suffix for n in _entries(tmp_path)] == [".o"]
    assert _stats(_spawn(tmp_path))["disk_hits"] == 1  # and it loads (through the DSL)


def test_key_must_be_hashable():
    with pytest.raises(TypeError):
        KernelCache().get(("pack_mask", ["not", "hashable"]), None, "sm_90a")


EDITED_CHILD = r"""
import json, sys
from pathlib import Path
import cute_kernels, layouts
from cute_kernels.ops.bitpack import make_build
from cute_kernels.runtime import compile as ck_compile
root = Path(sys.argv[1]).resolve()
for pkg in (cute_kernels, layouts):  # the copies, not the checkout or an installed package
    assert Path(pkg.__file__).resolve().is_relative_to(root), pkg.__file__
cache = ck_compile.KernelCache()
cache.get(("test-cache-edit", "pack_mask", "flat"), lambda: make_build("pack_mask", "flat"),
          "sm_90a")
print(json.dumps(dict(cache.stats, fingerprint=ck_compile._source_fingerprint())))
"""


def test_layouts_edit_invalidates_disk_cache(tmp_path):
    """The kernels trace ``layouts`` (the gated atoms, the sm80 swizzle), so an edit there
    must change the disk-cache entry names: the next lookup compiles instead of loading an
    object built from the old layouts."""
    src = tmp_path / "src"
    for pkg in (cute_kernels, layouts):
        shutil.copytree(os.path.dirname(pkg.__file__), src / pkg.__name__,
                        ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))

    def run():
        # run from tmp_path: ``python -c`` puts the working directory first on sys.path
        proc = subprocess.run([sys.executable, "-c", EDITED_CHILD, str(src)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first, again = run(), run()
    assert first["compiles"] == 1 and again["disk_hits"] == 1 and again["compiles"] == 0
    assert again["fingerprint"] == first["fingerprint"]
    with open(src / "layouts" / "atoms.py", "a") as f:
        f.write("\n# an edit to a traced layout source\n")
    edited = run()
    assert edited["fingerprint"] != first["fingerprint"]
    assert edited["compiles"] == 1 and edited["disk_hits"] == 0, edited
    assert len(_entries(cache)) == 2


def test_traced_packages_cover_every_first_party_import():
    """Every package of this checkout that ``cute_kernels`` imports is hashed into the disk
    cache's fingerprint (``TRACED_PACKAGES``)."""
    dirs = traced_package_dirs()
    root = dirs["cute_kernels"].parent
    imported = set()
    for path in dirs["cute_kernels"].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    first_party = set()
    for name in imported - set(sys.stdlib_module_names):
        spec = importlib.util.find_spec(name)
        origin = spec and (spec.origin or next(iter(spec.submodule_search_locations or []), None))
        # (a virtual environment inside the checkout holds third-party packages: not ours)
        if (origin and Path(origin).resolve().is_relative_to(root)
                and "site-packages" not in Path(origin).parts):
            first_party.add(name)
    assert "layouts" in first_party
    assert first_party <= set(TRACED_PACKAGES), first_party - set(TRACED_PACKAGES)
