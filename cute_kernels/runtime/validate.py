"""Input validation shared by every op: one place, errors that name the argument and the rule.

Everything here runs on tensor metadata only (no device sync, no kernel launch, no compile),
so ops call it first and a bad input never reaches the compiler or the GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

#: TMA and 16-byte vector accesses need 16-byte aligned base pointers and strides.
VECTOR_BYTES = 16


def dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    """``bfloat16``, ``bfloat16 or float16``, ``bfloat16, float16 or float32``."""
    return or_list(str(d).replace("torch.", "") for d in dtypes)


def or_list(items: Iterable[object]) -> str:
    """The items as English alternatives: ``a``, ``a or b``, ``a, b or c``."""
    words = [str(i) for i in items]
    return "".join(words) if len(words) < 2 else ", ".join(words[:-1]) + " or " + words[-1]


def check_tensor(
    name: str,
    t: object,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    min_ndim: int = 0,
    ndim: int | None = None,
    on_cuda: bool = True,
) -> torch.Tensor:
    """The common checks: a torch.Tensor, of an allowed dtype and rank, on a CUDA device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise TypeError(f"{name} must have dtype {dtype_names(dtypes)}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got a 0-d tensor"
                         if min_ndim == 1 else
                         f"{name} must have at least {min_ndim} dimensions, got {t.dim()}")
    if on_cuda:
        check_cuda(name, t)
    return t


def check_cuda(name: str, t: torch.Tensor) -> None:
    if t.device.type != "cuda":
        raise ValueError(f"{name} must be on a CUDA device, got {t.device} (the float32 "
                         "references in cute_kernels.reference run the same math on any "
                         "device, e.g. cute_kernels.reference.attention)")


def check_same_device(**tensors: torch.Tensor) -> None:
    devices = {n: t.device for n, t in tensors.items()}
    if len(set(devices.values())) > 1:
        desc = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"all tensors must be on the same device: {desc}")


def check_shape(name: str, t: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(t.shape)}")


def check_int(name: str, value: object, *, min_value: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if min_value is not None and value < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {value}")
    return value


def tensor_meta(t: torch.Tensor | None):
    """What the ops' validation caches key on: everything a tensor check reads (shape,
    strides, dtype, device, 16-byte alignment of the start), None for None."""
    if t is None:
        return None
    return t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % VECTOR_BYTES


#: plans an op's cache (keyed by ``tensor_meta`` tuples) holds before it starts over
MAX_PLANS = 4096


def remember_plan(cache: dict, key, plan) -> None:
    """Store ``plan`` under ``key`` in an op's plan cache, emptying it first when full (a
    process that keeps making new shapes must not grow it without bound)."""
    if len(cache) >= MAX_PLANS:
        cache.clear()
    cache[key] = plan


def row_vector_width(rows: torch.Tensor) -> int:
    """Elements per 16-byte load of a (R, N) tensor with unit column stride: 16 bytes' worth
    when every row starts 16-byte aligned (base and row stride) and N is a multiple, else 1
    (the row kernels then load element by element)."""
    vec = VECTOR_BYTES // rows.element_size()
    aligned = (rows.data_ptr() % VECTOR_BYTES == 0 and rows.shape[1] % vec == 0
               and (rows.shape[0] == 1 or rows.stride(0) % vec == 0))
    return vec if aligned else 1


def check_aligned(name: str, t: torch.Tensor, nbytes: int = VECTOR_BYTES) -> None:
    """TMA-style rule: base pointer and the strides of all but the unit-stride dim aligned."""
    if t.data_ptr() % nbytes:
        raise ValueError(f"{name} must start on a {nbytes}-byte boundary (TMA/vector access); "
                         f"its data pointer is {t.data_ptr() % nbytes} bytes off")
    esize = t.element_size()
    for dim, (s, n) in enumerate(zip(t.stride(), t.shape)):
        if s != 1 and n > 1 and (s * esize) % nbytes:
            raise ValueError(f"{name}.stride({dim}) = {s} elements = {s * esize} bytes must be a "
                             f"multiple of {nbytes} bytes (TMA/vector access)")


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    return t.data_ptr(), t.data_ptr() + extent * t.element_size()


def check_no_overlap(name: str, out: torch.Tensor, *inputs: torch.Tensor) -> None:
    """``out`` must not share memory with any input: kernels read inputs after they start
    writing, so an alias would be a silent wrong answer."""
    lo, hi = _byte_span(out)
    for t in inputs:
        t_lo, t_hi = _byte_span(t)
        if lo < t_hi and t_lo < hi:
            raise ValueError(f"{name} must not overlap the inputs' memory")


#: Debug mode: ops also run their value checks (which read device memory, so synchronise).
ENV_VALIDATE = "CUTE_KERNELS_VALIDATE"
_ENV_UNSET = object()
_env_validate: object = _ENV_UNSET


def value_checks(validate: bool | None) -> bool:
    """Whether an op runs its value checks (index ranges and the like: a device sync each).

    ``validate``: the op's ``validate=`` argument; True or False decide, None (the default)
    follows ``CUTE_KERNELS_VALIDATE`` (``1``/``true``/``yes``/``on`` turn the checks on; unset,
    ``0``/``false``/``no``/``off`` or empty leave them off). The variable is read once per
    process, like ``CUTE_KERNELS_PATH`` (:func:`reset_env_validate` re-reads it).
    """
    global _env_validate
    if validate is not None:
        if not isinstance(validate, bool):
            raise TypeError(f"validate must be a bool or None, got {type(validate).__name__}")
        return validate
    if _env_validate is _ENV_UNSET:
        import os

        env = os.environ.get(ENV_VALIDATE, "").strip().lower()
        if env not in ("", "0", "false", "no", "off", "1", "true", "yes", "on"):
            raise ValueError(f"{ENV_VALIDATE} must be 1 or 0 (true/false, yes/no, on/off), "
                             f"got {env!r}")
        _env_validate = env in ("1", "true", "yes", "on")
    return bool(_env_validate)


def reset_env_validate() -> None:
    """Re-read ``CUTE_KERNELS_VALIDATE`` at the next call (tests, notebooks)."""
    global _env_validate
    _env_validate = _ENV_UNSET
