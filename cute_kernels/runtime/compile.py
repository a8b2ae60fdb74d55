"""Compiling kernels, and the two caches in front of the compiler.

* **In memory**: ``{key: callable}`` for this process. Keys are tuples of hashable Python
  values only (op name, compile target, dtypes, tile, flags), never tensors: the compiled
  kernels take symbolic sizes, so one entry serves every shape.
* **On disk**: each compiled kernel is exported as an object file (``export_to_c``) under
  :func:`cache_dir` and loaded with ``cute.runtime.load_module`` by the next process, which
  then skips the compiler. Writers take a per-entry ``flock`` and publish with an atomic
  rename, so concurrent processes never see a half-written file. The file name hashes the
  key, the DSL / TVM-FFI / Python versions and the source of every package a kernel build
  traces (``cute_kernels`` and ``layouts``), so an upgrade or an edit never loads a stale
  kernel. ``cute-kernels cache clear`` (or deleting the folder) clears it;
  ``CUTE_KERNELS_DISK_CACHE=0`` turns it off; ``CUTE_KERNELS_CACHE_DIR`` moves it.

Every kernel is compiled with TVM-FFI (``--enable-tvm-ffi``): the compiled function takes
torch tensors directly and launches on torch's current stream (a fake stream marked
``use_tvm_ffi_env_stream``), costing a few µs per call instead of tens of µs for a per-call
``from_dlpack`` conversion.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ENV_CACHE_DIR = "CUTE_KERNELS_CACHE_DIR"
ENV_DISK_CACHE = "CUTE_KERNELS_DISK_CACHE"


@dataclass(frozen=True)
class Build:
    """What the compiler needs: the ``@cute.jit`` callable and its (fake) arguments."""

    fn: Callable
    args: tuple


def compile_options(target: str, *, keep_ptx_dir: str | None = None) -> str:
    opts = f"--enable-tvm-ffi --gpu-arch {target}"
    if keep_ptx_dir:
        opts += f" --keep-ptx --dump-dir {keep_ptx_dir}"
    return opts


def compile_build(build: Build, target: str):
    import cutlass.cute as cute

    return cute.compile(build.fn, *build.args, options=compile_options(target))


def compile_ptx(build: Build, target: str) -> str:
    """PTX text of a build for ``target``; needs no GPU."""
    import cutlass.cute as cute

    with tempfile.TemporaryDirectory(prefix="cute_kernels_ptx_") as d:
        compiled = cute.compile(build.fn, *build.args,
                                options=compile_options(target, keep_ptx_dir=d))
        ptx = compiled.__ptx__
    if not isinstance(ptx, str) or ".target" not in ptx:
        raise RuntimeError(f"the CuTe DSL produced no PTX for {target}")
    return ptx


def cache_dir() -> Path:
    root = os.environ.get(ENV_CACHE_DIR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cute_kernels")
    return Path(root)


def disk_cache_enabled() -> bool:
    return os.environ.get(ENV_DISK_CACHE, "1").strip().lower() not in ("0", "false", "no", "off")


#: Packages whose Python source a kernel build traces: the kernels themselves, and the
#: pure-Python layouts they turn into ``cute`` layouts (the gated accumulator atoms, the sm80
#: swizzle). An edit to any of them changes the compiled code, so all of them are hashed.
TRACED_PACKAGES = ("cute_kernels", "layouts")

_SOURCE_HASH: str | None = None


def traced_package_dirs() -> dict[str, Path]:
    """Where each traced package's source lives, found from the imported modules' ``__file__``
    (so an editable checkout and a wheel installed into site-packages are both covered)."""
    import importlib

    dirs = {}
    for name in TRACED_PACKAGES:
        init = getattr(importlib.import_module(name), "__file__", None)
        if not init:
            raise RuntimeError(f"cannot locate the source of the {name!r} package")
        dirs[name] = Path(init).resolve().parent
    return dirs


def _source_fingerprint() -> str:
    """Versions of everything a compiled object depends on, and the source of every package a
    kernel build traces (``TRACED_PACKAGES``)."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        import cutlass
        import tvm_ffi

        h = hashlib.sha256()
        h.update(f"{cutlass.__version__}|{tvm_ffi.__version__}|{sys.version_info[:2]}".encode())
        for name, pkg in traced_package_dirs().items():
            for path in sorted(pkg.rglob("*.py")):
                h.update(f"{name}/{path.relative_to(pkg).as_posix()}".encode())
                h.update(path.read_bytes())
        _SOURCE_HASH = h.hexdigest()[:16]
    return _SOURCE_HASH


def _entry_name(key: tuple) -> str:
    return hashlib.sha256(f"{_source_fingerprint()}|{key!r}".encode()).hexdigest()[:32]


class KernelCache:
    """key -> compiled callable, backed by the on-disk object cache."""

    def __init__(self):
        self._mem: dict[tuple, Callable] = {}
        self._lock = threading.Lock()
        self.stats = {"memory_hits": 0, "disk_hits": 0, "compiles": 0, "compile_s": 0.0}

    def get(self, key: tuple, make_build: Callable[[], Build], target: str) -> Callable:
        fn = self._mem.get(key)
        if fn is not None:
            self.stats["memory_hits"] += 1
            return fn
        hash(key)  # a key must be hashable values only: fail loudly here, not in a dict
        with self._lock:
            fn = self._mem.get(key)
            if fn is None:
                fn = self._load_or_compile(key, make_build, target)
                self._mem[key] = fn
        return fn

    def _compile(self, make_build, target):
        t0 = time.perf_counter()
        compiled = compile_build(make_build(), target)
        self.stats["compiles"] += 1
        self.stats["compile_s"] += time.perf_counter() - t0
        return compiled

    def _load_or_compile(self, key, make_build, target) -> Callable:
        if not disk_cache_enabled():
            return self._compile(make_build, target)
        import cutlass.cute as cute

        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        name = _entry_name((key, target))
        obj = directory / f"{name}.o"
        symbol = f"ck_{name}"
        with open(directory / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one compiler per entry across processes
            if obj.exists():
                with contextlib.suppress(Exception):  # a broken file is recompiled below
                    fn = cute.runtime.load_module(str(obj), enable_tvm_ffi=True)[symbol]
                    self.stats["disk_hits"] += 1
                    return fn
            compiled = self._compile(make_build, target)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".o")
            os.close(fd)
            try:
                compiled.export_to_c(tmp, function_name=symbol)
                os.replace(tmp, obj)  # atomic publish
            except Exception:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                # The in-process kernel still works; the next process just compiles again.
            return compiled


KERNELS = KernelCache()


def clear_disk_cache() -> int:
    """Delete every cached object; returns how many files were removed."""
    directory = cache_dir()
    removed = 0
    if directory.is_dir():
        for path in directory.iterdir():
            if path.suffix in (".o", ".lock") or path.name.startswith("."):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
    return removed
