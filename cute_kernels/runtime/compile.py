"""Compiling kernels, and the two caches in front of the compiler.

* **In memory**: ``{key: callable}`` for this process. Keys are tuples of hashable Python
  values only (op name, compile target, dtypes, tile, flags), never tensors: the compiled
  kernels take symbolic sizes, so one entry serves every shape.
* **On disk**: each compiled kernel is exported as an object file (``export_to_c``) under
  :func:`cache_dir` and, where a C compiler driver (``cc``) is on the PATH, linked into a
  shared library against the DSL runtime and TVM-FFI (rpath'd to where they live). The next
  process loads the ``.so`` with ``tvm_ffi.load_module`` and never imports the DSL (importing
  ``cutlass`` and JIT-linking an object cost ~0.5 s, more than a whole warm first call may
  take); without a linker it keeps the ``.o`` and loads it with ``cute.runtime.load_module``.
  Writers take a per-entry ``flock`` and publish with an atomic rename, so concurrent
  processes never see a half-written file. The file name hashes the
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


def dsl_version() -> str:
    """The installed CuTe DSL's version, read from its package metadata: importing ``cutlass``
    just to read ``__version__`` would cost the warm path the import it exists to avoid."""
    from importlib import metadata

    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:  # a source build of the DSL: no metadata
        import cutlass

        return cutlass.__version__


def _source_fingerprint() -> str:
    """Versions of everything a compiled object depends on, and the source of every package a
    kernel build traces (``TRACED_PACKAGES``)."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        import tvm_ffi

        h = hashlib.sha256()
        h.update(f"{dsl_version()}|{tvm_ffi.__version__}|{sys.version_info[:2]}".encode())
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
        self._owners: list = []  # DSL objects whose bare functions _mem holds
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
                fn = self._positional(self._load_or_compile(key, make_build, target))
                self._mem[key] = fn
        return fn

    def _positional(self, fn) -> Callable:
        """The bare TVM-FFI function under a kernel the DSL compiled or loaded: ops pass every
        argument positionally (``KernelParams.call_args``), so the DSL's keyword wrapper
        (two Python frames, several µs per launch) is not needed. The DSL object is kept
        alive with it (it owns the code the function runs)."""
        bare = getattr(fn, "__tvm_ffi_object__", None)
        args = getattr(fn, "execution_args", None)
        if bare is None or args is None or args.has_pointer_address_arg_specs:
            return fn
        function = bare()
        if function is None:
            return fn
        self._owners.append(fn)
        return function

    def _compile(self, make_build, target):
        t0 = time.perf_counter()
        compiled = compile_build(make_build(), target)
        self.stats["compiles"] += 1
        self.stats["compile_s"] += time.perf_counter() - t0
        return compiled

    def _load_or_compile(self, key, make_build, target) -> Callable:
        if not disk_cache_enabled():
            return self._compile(make_build, target)
        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        name = _entry_name((key, target))
        symbol = f"ck_{name}"
        with open(directory / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one compiler per entry across processes
            fn = _load_entry(directory, name, symbol)
            if fn is not None:
                self.stats["disk_hits"] += 1
                return fn
            compiled = self._compile(make_build, target)
            _store_entry(compiled, directory, name, symbol)
            return compiled


def _load_entry(directory: Path, name: str, symbol: str):
    """The cached kernel ``symbol`` of entry ``name`` (its ``.so`` first, without the DSL; else
    its ``.o``, through the DSL), or None when there is none or it does not load (a broken
    file is then recompiled and replaced)."""
    lib, obj = directory / f"{name}.so", directory / f"{name}.o"
    if lib.exists():
        with contextlib.suppress(Exception):
            import tvm_ffi

            return tvm_ffi.load_module(str(lib))[symbol]
        # e.g. the DSL runtime moved since the link: the DSL's loader finds it again (slower,
        # but a working entry is never recompiled on every run)
        with contextlib.suppress(Exception):
            import cutlass.cute as cute

            return cute.runtime.load_module(str(lib), enable_tvm_ffi=True)[symbol]
    if obj.exists():
        with contextlib.suppress(Exception):
            import cutlass.cute as cute

            return cute.runtime.load_module(str(obj), enable_tvm_ffi=True)[symbol]
    return None


def _store_entry(compiled, directory: Path, name: str, symbol: str) -> None:
    """Export ``compiled`` as entry ``name``: the linked ``.so`` where a linker is available,
    else the ``.o``. Failures only cost the next process a compile."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".o")
    os.close(fd)
    try:
        compiled.export_to_c(tmp, function_name=symbol)
        lib = _link_shared(tmp, directory, name)
        if lib is not None:
            os.replace(lib, directory / f"{name}.so")  # atomic publish
        else:
            os.replace(tmp, directory / f"{name}.o")
    except Exception:
        pass  # the in-process kernel still works; the next process just compiles again
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _link_shared(obj: str, directory: Path, name: str) -> str | None:
    """Link the exported object into a shared library that needs nothing but ``dlopen``: it
    names the DSL runtime and TVM-FFI libraries it calls (resolved through an rpath to the
    folders the DSL loads them from). None when there is no ``cc`` or the link fails."""
    import shutil
    import subprocess

    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return None
    from cutlass.runtime import find_runtime_libraries

    libs = [Path(p) for p in find_runtime_libraries(enable_tvm_ffi=True) if Path(p).exists()]
    fd, out = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".so")
    os.close(fd)
    cmd = [cc, "-shared", "-o", out, obj]
    for lib in libs:
        cmd += [f"-L{lib.parent}", f"-Wl,-rpath,{lib.parent}", f"-l:{lib.name}"]
    if subprocess.run(cmd, capture_output=True).returncode:
        with contextlib.suppress(OSError):
            os.unlink(out)
        return None
    return out


KERNELS = KernelCache()


ENTRY_SUFFIXES = (".so", ".o")


def cached_entries() -> list[Path]:
    """The cached kernels on disk (linked ``.so`` or bare ``.o`` entries)."""
    directory = cache_dir()
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir()
            if p.suffix in ENTRY_SUFFIXES and not p.name.startswith(".")]


def clear_disk_cache() -> int:
    """Delete every cached object; returns how many files were removed."""
    directory = cache_dir()
    removed = 0
    if directory.is_dir():
        for path in directory.iterdir():
            if path.suffix in (*ENTRY_SUFFIXES, ".lock") or path.name.startswith("."):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
    return removed
