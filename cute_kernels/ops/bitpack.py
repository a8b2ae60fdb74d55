"""``pack_mask`` / ``unpack_mask``: the torch API of the bitpacked-mask kernels."""

from __future__ import annotations

import torch

from ..runtime.bridge import fake_rows, fake_vector, kernel_for
from ..runtime.compile import Build
from ..runtime.launch import kernel_params, launch_args
from ..runtime.validate import (
    VECTOR_BYTES,
    check_cuda,
    check_int,
    check_same_device,
    check_shape,
    check_tensor,
)
from .dispatch import KernelOp

MAX_FLAT_VECTORS = 2**31 - 1  # the flat kernels index 16-byte vectors with int32


def packed_width(n: int) -> int:
    return (n + 7) // 8


#: The kernel class of each (op, variant), by name: the module is imported only to compile
#: (a call never imports the DSL, :mod:`~cute_kernels.runtime.launch`).
KERNEL_CLASSES = {("pack_mask", "flat"): "PackMaskFlat", ("unpack_mask", "flat"): "UnpackMaskFlat",
                  ("pack_mask", "rows"): "PackMaskRows", ("unpack_mask", "rows"): "UnpackMaskRows"}
KERNEL_MODULE = "cute_kernels.kernels.bitpack"


def kernel_class(op: str, variant: str) -> type:
    import importlib

    return getattr(importlib.import_module(KERNEL_MODULE), KERNEL_CLASSES[op, variant])


def _named(op: str, variant: str, mask, packed) -> dict:
    """The kernel's arguments by parameter name: the flat kernels copy ``mSrc`` into
    ``mDst``; the row kernels name the mask and the packed bytes."""
    if variant == "flat":
        src, dst = (mask, packed) if op == "pack_mask" else (packed, mask)
        return {"mSrc": src, "mDst": dst}
    return {"mMask": mask, "mPacked": packed}


def make_build(op: str, variant: str) -> Build:
    """The kernel object and fake arguments of one (op, variant); arch-independent."""
    if variant == "flat":
        mask, packed = fake_vector(torch.uint8, divisibility=8), fake_vector(torch.uint8)
    elif variant == "rows":
        mask, packed = fake_rows(torch.uint8, compact=False), fake_rows(torch.uint8, compact=True)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    kernel = kernel_class(op, variant)()
    return Build(kernel, launch_args(kernel, **_named(op, variant, mask, packed)))


VARIANTS = ("flat", "rows")


def _use_flat(mask_bytes: torch.Tensor, packed: torch.Tensor, n: int) -> bool:
    # Contiguous, so only the base pointers need the 16-byte alignment of the vector accesses.
    return (n % 8 == 0 and mask_bytes.is_contiguous() and packed.is_contiguous()
            and mask_bytes.data_ptr() % VECTOR_BYTES == 0
            and packed.data_ptr() % VECTOR_BYTES == 0
            and mask_bytes.numel() // 16 <= MAX_FLAT_VECTORS)


def _as_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """(R, n) view with unit column stride; copies only if no such view exists."""
    try:
        rows = t.view(-1, n)
    except RuntimeError:
        rows = t.contiguous().view(-1, n)
    if n > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    return rows


def _run(op: str, device: torch.device, mask_bytes: torch.Tensor, packed: torch.Tensor,
         n: int) -> None:
    variant = "flat" if _use_flat(mask_bytes, packed, n) else "rows"
    kernel = kernel_for(device, (op, variant), lambda path, target: make_build(op, variant))
    if variant == "flat":
        mask_bytes, packed = mask_bytes.view(-1), packed.view(-1)
    else:
        mask_bytes, packed = _as_rows(mask_bytes, n), packed.view(-1, packed_width(n))
    params = kernel_params(f"{KERNEL_MODULE}:{KERNEL_CLASSES[op, variant]}")
    kernel(*params.call_args(**_named(op, variant, mask_bytes, packed)))


def _check_mask(mask) -> None:
    check_tensor("mask", mask, dtypes=(torch.bool,), min_ndim=1, on_cuda=False)


def _check_packed(packed, n) -> None:
    check_tensor("packed", packed, dtypes=(torch.uint8,), min_ndim=1, on_cuda=False)
    check_int("n", n, min_value=0)
    if packed.shape[-1] != packed_width(n):
        raise ValueError(f"packed.shape[-1] must be ceil(n / 8) = {packed_width(n)} for n = {n}, "
                         f"got {packed.shape[-1]}")


def _check_out(out, shape: tuple[int, ...], dtype: torch.dtype, like: torch.Tensor) -> None:
    check_tensor("out", out, dtypes=(dtype,), on_cuda=False)  # the input's device: checked
    check_shape("out", out, shape)
    check_same_device(input=like, out=out)
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")


def _pack_mask_impl(mask: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The direct route (arguments validated but for the device)."""
    check_cuda("mask", mask)
    n = mask.shape[-1]
    packed = out if out is not None else torch.empty(
        *mask.shape[:-1], packed_width(n), dtype=torch.uint8, device=mask.device)
    if packed.numel():
        _run("pack_mask", mask.device, mask.view(torch.uint8), packed, n)
    return packed


def _unpack_mask_impl(packed: torch.Tensor, n: int,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """The direct route (arguments validated but for the device)."""
    check_cuda("packed", packed)
    mask = out if out is not None else torch.empty(
        *packed.shape[:-1], n, dtype=torch.bool, device=packed.device)
    if mask.numel():
        packed_rows = packed if packed.is_contiguous() else packed.contiguous()
        _run("unpack_mask", packed.device, mask.view(torch.uint8), packed_rows, n)
    return mask


@torch.library.custom_op("cute_kernels::pack_mask", mutates_args=())
def _pack_mask_op(mask: torch.Tensor) -> torch.Tensor:
    return _pack_mask_impl(mask)


@_pack_mask_op.register_fake
def _(mask):
    return mask.new_empty((*mask.shape[:-1], (mask.shape[-1] + 7) // 8), dtype=torch.uint8)


@torch.library.custom_op("cute_kernels::unpack_mask", mutates_args=())
def _unpack_mask_op(packed: torch.Tensor, n: int) -> torch.Tensor:
    return _unpack_mask_impl(packed, n)


@_unpack_mask_op.register_fake
def _(packed, n):
    return packed.new_empty((*packed.shape[:-1], n), dtype=torch.bool)


_PACK_MASK = KernelOp(_pack_mask_op, _pack_mask_impl)
_UNPACK_MASK = KernelOp(_unpack_mask_op, _unpack_mask_impl)


def pack_mask(mask: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Pack a bool mask ``[..., N]`` into ``uint8 [..., ceil(N / 8)]``: 8x less memory.

    Bit ``b`` of byte ``j`` holds ``mask[..., 8 * j + b]`` (little-endian within a byte); the
    unused high bits of a row's last byte are 0. The same bits as
    ``cute_kernels.reference.pack_mask`` (plain torch, any device). Not differentiable
    (bool in, uint8 out).

    Args:
        mask: bool tensor ``[..., N]`` on a CUDA device, at least 1-D; any leading shape,
            any ``N``. Rows that cannot be viewed with unit stride are copied once first.
        out: optional contiguous uint8 tensor of shape ``[..., ceil(N / 8)]`` on mask's
            device to write into.

    Returns:
        uint8 ``[..., ceil(N / 8)]`` on mask's device (``out`` itself when given).

    Raises:
        TypeError: ``mask`` not a tensor or not bool; ``out`` not uint8.
        ValueError: a 0-d ``mask``, an ``out`` of the wrong shape, device or strides, or a
            CPU tensor.
        UnsupportedGPUError: a GPU without a kernel path.
    """
    _check_mask(mask)
    shape = (*mask.shape[:-1], packed_width(mask.shape[-1]))
    if out is not None:
        _check_out(out, shape, torch.uint8, mask)
    return _PACK_MASK(mask, out=out)


def unpack_mask(packed: torch.Tensor, n: int, *, out: torch.Tensor | None = None
                ) -> torch.Tensor:
    """Inverse of :func:`pack_mask`: ``uint8 [..., ceil(n / 8)]`` -> ``bool [..., n]``.

    ``mask[..., 8 * j + b]`` is bit ``b`` of byte ``j`` (little-endian within a byte); bits
    past ``n`` in each row's last byte are ignored. The same values as
    ``cute_kernels.reference.unpack_mask`` (plain torch, any device).

    Args:
        packed: uint8 tensor ``[..., ceil(n / 8)]`` on a CUDA device, at least 1-D.
        n: the number of mask entries per row (an int >= 0); the row length of the result.
        out: optional contiguous bool tensor of shape ``[..., n]`` on packed's device to
            write into.

    Returns:
        bool ``[..., n]`` on packed's device (``out`` itself when given).

    Raises:
        TypeError: ``packed`` not a tensor or not uint8, ``n`` not an int, ``out`` not
            bool.
        ValueError: ``n < 0``, ``packed.shape[-1] != ceil(n / 8)``, an ``out`` of the wrong
            shape, device or strides, or a CPU tensor.
        UnsupportedGPUError: a GPU without a kernel path.
    """
    _check_packed(packed, n)
    if out is not None:
        _check_out(out, (*packed.shape[:-1], n), torch.bool, packed)
    return _UNPACK_MASK(packed, n, out=out)


def pack_mask_reference(mask: torch.Tensor) -> torch.Tensor:
    """Plain-torch pack (any device, any N): the test oracle and the torch.compile baseline."""
    n = mask.shape[-1]
    pad = packed_width(n) * 8 - n
    m = torch.nn.functional.pad(mask.to(torch.uint8), (0, pad)) if pad else mask.to(torch.uint8)
    m = m.view(*mask.shape[:-1], -1, 8)
    shifts = torch.arange(8, device=mask.device, dtype=torch.uint8)
    return (m << shifts).sum(-1, dtype=torch.uint8)


def unpack_mask_reference(packed: torch.Tensor, n: int) -> torch.Tensor:
    shifts = torch.arange(8, device=packed.device, dtype=torch.uint8)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(-2)[..., :n].bool()
