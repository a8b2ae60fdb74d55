"""Which kernel path runs on which GPU, and what target a kernel is compiled for.

Two paths exist for every kernel: ``hopper`` (sm_90a: TMA, WGMMA, warp specialization) and
``ampere`` (sm_80: cp.async, ldmatrix, mma.sync). The path is an algorithm; the compile target
is the GPU's own architecture. The Ampere path forced on a Hopper GPU is therefore compiled for
sm_90a (a cubin built for sm_80 does not load on sm_90), while ``cute-kernels ptx --arch sm_80``
compiles it for sm_80.

Forcing: ``CUTE_KERNELS_PATH=ampere`` in the environment, or ``with force_path("ampere"):``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

HOPPER, AMPERE = "hopper", "ampere"
PATHS = (HOPPER, AMPERE)
#: Compile targets per path when no GPU is present (``cute-kernels ptx``/``demo`` on a CPU).
PATH_OF_TARGET = {"sm_90a": HOPPER, "sm_80": AMPERE, "sm_86": AMPERE, "sm_89": AMPERE}
ENV_VAR = "CUTE_KERNELS_PATH"


class _ThreadState(threading.local):
    """Per-thread overrides; the class attributes are the unset defaults, so reading them
    costs an attribute lookup, not a failed one (``getattr`` with a default raises and
    catches internally: ~0.4 µs on every op call)."""

    path: str | None = None  # force_path
    sm_budget: tuple | None = None  # sm_budget: (device index, SMs, confined)


_local = _ThreadState()


class UnsupportedGPUError(RuntimeError):
    """The GPU's architecture has no kernel path in cute-kernels.

    A ``RuntimeError`` raised by an op on a CUDA device whose compute capability is neither
    9.0 (the Hopper path, sm_90a) nor 8.0/8.6/8.7/8.9 (the Ampere path), or when the Hopper
    path is forced (:func:`force_path`, ``CUTE_KERNELS_PATH``) on a GPU that is not sm_90.
    The message names the capability found. The float32 references in
    ``cute_kernels.reference`` run on any device.
    """


def _check_path_name(path: str) -> str:
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    return path


@contextlib.contextmanager
def force_path(path: str | None) -> Iterator[None]:
    """Context manager: the ops called inside run the given kernel path.

    ``with ck.force_path("ampere"): y = ck.gemm(a, b)`` runs the Ampere kernels (cp.async,
    mma.sync) on a Hopper GPU, e.g. to compare the two paths; the path takes precedence over
    the ``CUTE_KERNELS_PATH`` environment variable. Thread-local; nests (the previous path
    comes back on exit). Compiled kernels are cached per path, so switching costs nothing
    after the first call of each.

    Args:
        path: "hopper" (sm_90 GPUs only), "ampere" (any supported GPU) or None (automatic:
            the GPU's own path, or ``CUTE_KERNELS_PATH`` when set).

    Raises:
        ValueError: any other ``path`` (at the ``with`` statement).
        UnsupportedGPUError: (from the ops inside) "hopper" on a GPU that is not sm_90.
    """
    if path is not None:
        _check_path_name(path)
    prev = _local.path
    _local.path = path
    try:
        yield
    finally:
        _local.path = prev


_ENV_UNSET = object()
_env_path: object = _ENV_UNSET


def _path_from_env() -> str | None:
    env = os.environ.get(ENV_VAR, "").strip().lower()
    if env in ("", "auto"):
        return None
    if env not in PATHS:
        raise ValueError(f"{ENV_VAR} must be 'hopper', 'ampere' or 'auto', got {env!r}")
    return env


def forced_path() -> str | None:
    """The forced path, if any: ``force_path`` first, then ``CUTE_KERNELS_PATH``.

    The environment variable is read once per process (on the first op call), since reading
    ``os.environ`` on every call costs more than a small kernel's launch.
    """
    global _env_path
    path = _local.path
    if path is not None:
        return path
    if _env_path is _ENV_UNSET:
        _env_path = _path_from_env()
    return _env_path  # type: ignore[return-value]


def reset_env_path() -> None:
    """Re-read ``CUTE_KERNELS_PATH`` at the next call (tests, notebooks)."""
    global _env_path
    _env_path = _ENV_UNSET


def target_for_capability(major: int, minor: int) -> str:
    """The compile target (CuTe DSL arch string) for a GPU's compute capability."""
    if (major, minor) == (9, 0):
        return "sm_90a"
    if major == 8 and minor in (0, 6, 7, 9):
        return f"sm_{major}{minor}"
    raise UnsupportedGPUError(
        f"compute capability {major}.{minor} is not supported: cute-kernels has a Hopper path "
        f"(sm_90) and an Ampere path (sm_80/86/87/89)"
    )


def select_path(major: int, minor: int) -> str:
    """The kernel path for a GPU, honouring :func:`force_path` / ``CUTE_KERNELS_PATH``."""
    native = HOPPER if target_for_capability(major, minor) == "sm_90a" else AMPERE
    forced = forced_path()
    if forced is None or forced == native:
        return native
    if forced == AMPERE:  # Hopper runs every Ampere instruction the Ampere path uses.
        return AMPERE
    raise UnsupportedGPUError(
        f"the Hopper path needs an sm_90 GPU; this one is sm_{major}{minor}"
    )


def _device_index(device) -> int:
    """The CUDA index of a torch device (None: the current device)."""
    import torch

    return torch.cuda.current_device() if device.index is None else device.index


_CAPABILITY: dict[int, tuple[int, int]] = {}


def device_target(device) -> tuple[str, str]:
    """(path, compile target) for a torch CUDA device."""
    import torch

    index = _device_index(device)
    if index not in _CAPABILITY:
        _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    major, minor = _CAPABILITY[index]
    return select_path(major, minor), target_for_capability(major, minor)


def target_has_pdl(target: str) -> bool:
    """Whether kernels compiled for ``target`` (``sm_80``, ``sm_90a``, ...) may use
    programmatic dependent launch (``griddepcontrol``: sm_90 and later): a finishing kernel
    (the split-KV combine) launched while the kernel before it still runs."""
    return int(target.removeprefix("sm_").rstrip("af")) >= 90


_SM_COUNT: dict[int | None, int] = {}


def device_sm_count(device) -> int:
    """Every streaming multiprocessor of CUDA ``device`` (a torch.device), read once."""
    index = device.index
    if index not in _SM_COUNT:
        import torch

        _SM_COUNT[index] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNT[index]


def _driver(call, *args):
    """A CUDA driver call (cuda-python) that must succeed: its result(s)."""
    from cuda.bindings import driver

    err, *out = call(*args)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{call.__name__} failed: {err}")
    return out[0] if len(out) == 1 else tuple(out)


#: an empty sm_90 kernel for the driver's cluster occupancy query (PTX, JIT-loaded in ms)
_EMPTY_KERNEL_PTX = b""".version 7.8
.target sm_90
.address_size 64
.visible .entry cute_kernels_cluster_probe() { ret; }
"""
_CLUSTER_CAPACITY: dict[tuple, int] = {}


def cluster_capacity(device, cluster_size: int) -> int:
    """How many clusters of ``cluster_size`` CTAs, one CTA per SM (a CTA that takes most of
    an SM's shared memory), CUDA ``device`` (a torch.device) runs at once: a cluster lives in
    one GPC, so this is the sum over GPCs of their SMs // cluster_size, not SMs //
    cluster_size. The driver's occupancy query (``cuOccupancyMaxActiveClusters``) on an empty
    kernel that asks for all the shared memory a CTA may have; read once per device and size.
    Inside an ``SmPartition`` region: the region's SMs // cluster_size at most."""
    index = _device_index(device)
    key = (index, cluster_size)
    if key not in _CLUSTER_CAPACITY:
        import torch
        from cuda.bindings import driver

        with torch.cuda.device(index):
            # the query runs on the driver's current context: make torch create it first
            torch.zeros(1, device=torch.device("cuda", index))
            module = _driver(driver.cuModuleLoadData, _EMPTY_KERNEL_PTX)
            try:
                kernel = _driver(driver.cuModuleGetFunction, module,
                                 b"cute_kernels_cluster_probe")
                smem = _driver(driver.cuDeviceGetAttribute, driver.CUdevice_attribute
                               .CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                               _driver(driver.cuDeviceGet, index))
                attribute = driver.CUfunction_attribute
                _driver(driver.cuFuncSetAttribute, kernel,
                        attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
                _driver(driver.cuFuncSetAttribute, kernel,
                        attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                value = driver.CUlaunchAttributeValue()
                value.clusterDim.x, value.clusterDim.y, value.clusterDim.z = cluster_size, 1, 1
                dims = driver.CUlaunchAttribute()
                dims.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                dims.value = value
                config = driver.CUlaunchConfig()
                config.gridDimX, config.gridDimY, config.gridDimZ = cluster_size, 1, 1
                config.blockDimX, config.blockDimY, config.blockDimZ = 128, 1, 1
                config.sharedMemBytes = smem
                config.numAttrs = 1
                config.attrs = [dims]
                _CLUSTER_CAPACITY[key] = _driver(driver.cuOccupancyMaxActiveClusters, kernel,
                                                 config)
            finally:
                _driver(driver.cuModuleUnload, module)
    return min(_CLUSTER_CAPACITY[key], sm_count(device) // cluster_size)


_HBM_GBPS: dict[int, float] = {}


def hbm_gbps(device) -> float:
    """CUDA ``device``'s peak memory bandwidth in GB/s (memory clock x bus width x 2, from
    the driver's attributes), read once."""
    index = _device_index(device)
    if index not in _HBM_GBPS:
        from cuda.bindings import driver

        _driver(driver.cuInit, 0)
        dev = _driver(driver.cuDeviceGet, index)

        def attribute(name):
            return _driver(driver.cuDeviceGetAttribute,
                           getattr(driver.CUdevice_attribute, name), dev)

        khz = attribute("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")
        bits = attribute("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
        _HBM_GBPS[index] = khz * 1e3 * 2 * bits / 8 / 1e9
    return _HBM_GBPS[index]


def sm_count(device) -> int:
    """The SMs a persistent kernel on ``device`` sizes its grid by: every SM, or inside a
    region of a ``cute_kernels.SmPartition`` (:func:`sm_budget`) that region's share."""
    budget = _local.sm_budget
    if budget is not None and budget[0] == device.index:
        return budget[1]
    return device_sm_count(device)


def confining_grid(device) -> int | None:
    """Inside an :func:`sm_budget` region that the hardware does not confine (no green
    context): the region's SMs, which a kernel that would launch one CTA per tile must use as
    its persistent grid instead, or it spreads over the whole GPU. Otherwise None."""
    budget = _local.sm_budget
    if budget is not None and budget[0] == device.index and not budget[2]:
        return budget[1]
    return None


@contextlib.contextmanager
def sm_budget(device, sms: int, confined: bool) -> Iterator[None]:
    """Size the persistent grids of the ops called in this block (this thread) to ``sms``
    SMs of ``device``; ``confined``: a green context already keeps the block's kernels on
    them. Nests; the outer budget returns on exit."""
    outer = _local.sm_budget
    _local.sm_budget = (device.index, sms, confined)
    try:
        yield
    finally:
        _local.sm_budget = outer
