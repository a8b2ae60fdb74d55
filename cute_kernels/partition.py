"""``SmPartition``: one GPU's SMs split between a main stream and a side stream, so an
independent small job (``scatter_add``'s cache writeback) runs beside a GEMM instead of after it
(issue 16; Chipmunk Part III puts the writeback on the SMs a GEMM leaves idle).

    part = cute_kernels.SmPartition(side_sms=8)
    with part:                                   # both streams wait for the current one
        with part.main():                        # the rest of the SMs
            out = cute_kernels.linear(x, w)
        with part.side():                        # side_sms SMs
            cute_kernels.scatter_add(src, cache, indices, counts)
    # here the current stream has waited for both

Two ways to split, ``mode``:

* ``"green"``: two CUDA green contexts (cuda-python: ``cuDevSmResourceSplitByCount``,
  ``cuGreenCtxCreate``, ``cuGreenCtxStreamCreate``) whose streams run on disjoint SMs. The
  hardware confines every kernel, ours, cuBLAS's and torch's. The driver rounds ``side_sms``
  up to its split granularity (8 on Hopper): ``side_sms`` / ``main_sms`` say what was made.
* ``"streams"``: two ordinary streams, the side one at high priority; only the confinement our
  own kernels can do themselves. Inside ``main()`` and ``side()`` every persistent kernel of
  this package sizes its grid to the region's SMs, and ``scatter_add`` runs as that many
  persistent CTAs instead of one CTA per tile. Launch the main work first: its persistent CTAs
  then hold their SMs and the side kernel's CTAs land on the free ones. Other libraries'
  kernels (cuBLAS) spread over the whole GPU.
* ``"auto"`` (default): green if the driver, cuda-python and the GPU allow it, else streams
  (``fallback_reason`` says why).

In both modes the regions also size our persistent grids (``runtime.arch.sm_budget``). The
fork and join are CUDA events, so a partitioned block can be captured in a CUDA graph. As
with any side stream, a tensor allocated inside ``main()`` / ``side()`` and used after the
join belongs to that stream's memory pool: ``run`` calls ``record_stream`` on the tensors it
returns; with the context managers, call ``t.record_stream(torch.cuda.current_stream())``.
Green contexts are made once per (device, side SMs) and kept for the process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from .runtime.arch import device_sm_count, sm_budget

__all__ = ["SmPartition", "green_contexts_available"]

MODES = ("auto", "green", "streams")


class GreenContextError(RuntimeError):
    """Green contexts cannot be made here (old driver or cuda-python, a GPU or a split the
    driver refuses); the message says which call failed."""


class _GreenSplit:
    """Two green contexts on disjoint SMs of one device and a stream in each (kept alive for
    the process: torch's ExternalStream wrappers hold only the raw handles)."""

    def __init__(self, index: int, side_sms: int, fine_grained: bool):
        try:
            from cuda.bindings import driver as cu
        except ImportError as err:  # pragma: no cover - cuda-python is a dependency
            raise GreenContextError(f"cuda-python (cuda.bindings) is not importable: {err}") \
                from err
        self._cu = cu
        _call(cu, "cuInit", 0)
        version = _call(cu, "cuDriverGetVersion")
        if version < 12040:
            raise GreenContextError(f"the driver supports CUDA {version // 1000}."
                                    f"{version % 1000 // 10}; green contexts need 12.4")
        dev = _call(cu, "cuDeviceGet", index)
        sms = _call(cu, "cuDeviceGetDevResource", dev,
                    cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
        flags = int(cu.CUdevSmResourceSplitByCount_flags
                    .CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) if fine_grained else 0
        groups, made, rest = _call(cu, "cuDevSmResourceSplitByCount", 1, sms, flags, side_sms)
        if made < 1 or rest.sm.smCount < 1:
            raise GreenContextError(f"the driver cannot split {sms.sm.smCount} SMs into "
                                    f"{side_sms} and the rest")
        self.side_sms, self.main_sms = groups[0].sm.smCount, rest.sm.smCount
        self.side_ctx, self.side_stream = self._context(dev, groups[0])
        self.main_ctx, self.main_stream = self._context(dev, rest)

    def _context(self, dev, resource):
        cu = self._cu
        desc = _call(cu, "cuDevResourceGenerateDesc", [resource], 1)
        ctx = _call(cu, "cuGreenCtxCreate", desc, dev,
                    cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)
        stream = _call(cu, "cuGreenCtxStreamCreate", ctx,
                       cu.CUstream_flags.CU_STREAM_NON_BLOCKING, 0)
        return ctx, stream


def _call(cu, name: str, *args):
    """``cu.name(*args)`` with its CUresult checked: the other results (one unpacked)."""
    fn = getattr(cu, name, None)
    if fn is None:
        raise GreenContextError(f"cuda-python has no {name} (it needs cuda-python >= 12.4)")
    err, *out = fn(*args)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise GreenContextError(f"{name} failed: {err.name}")
    return out[0] if len(out) == 1 else tuple(out)


_SPLITS: dict[tuple[int, int, bool], _GreenSplit | GreenContextError] = {}
_SPLITS_LOCK = threading.Lock()


def _green_split(index: int, side_sms: int, fine_grained: bool = False) -> _GreenSplit:
    with _SPLITS_LOCK:
        key = (index, side_sms, fine_grained)
        hit = _SPLITS.get(key)
        if hit is None:
            try:
                hit = _GreenSplit(index, side_sms, fine_grained)
            except GreenContextError as err:
                hit = err
            except Exception as err:  # cuda-python's own (a driver library it cannot load)
                hit = GreenContextError(f"{type(err).__name__}: {err}")
            _SPLITS[key] = hit
    if isinstance(hit, GreenContextError):
        raise hit
    return hit


def green_contexts_available(device=None) -> bool:
    """Whether ``SmPartition(mode="green")`` works on ``device`` (makes and caches a split of
    8 SMs to find out)."""
    index = _device(device).index
    try:
        _green_split(index, 8)
    except GreenContextError:
        return False
    return True


def _device(device) -> torch.device:
    if not torch.cuda.is_available():
        raise RuntimeError("SmPartition needs a CUDA device (it splits a GPU's SMs)")
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    return torch.device("cuda", device.index if device.index is not None
                        else torch.cuda.current_device())


class SmPartition:
    """A GPU's SMs split between ``main_stream`` (``main_sms``) and ``side_stream``
    (``side_sms``): run independent work side by side, each on its own SMs.

    ``with part:`` forks both streams from the current one and joins them back on exit;
    ``part.main()`` / ``part.side()`` make a stream current and size this package's persistent
    grids to its SMs; ``part.run(main_fn, side_fn)`` does all of it. ``mode`` says whether
    green contexts confine the streams (``"green"``) or only our kernels confine themselves
    (``"streams"``); see the module docstring of ``cute_kernels.partition``.
    """

    def __init__(self, side_sms: int, *, device=None, mode: str = "auto",
                 fine_grained: bool = False):
        """Split the SMs of ``device``.

        Args:
            side_sms: SMs for the side stream, at least 1 and fewer than the GPU has (green
                contexts round it up to the driver's granularity: read ``self.side_sms``).
            device: the CUDA device (default: the current one).
            mode: ``"auto"`` (green contexts where available, else streams; then
                ``fallback_reason`` says why), ``"green"`` or ``"streams"``.
            fine_grained: green contexts split at the driver's finest granularity
                (``CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING``: fewer SMs than the 8 of
                Hopper's co-scheduled groups) at the cost of large thread clusters on them.

        Raises:
            TypeError: ``side_sms`` not an int.
            ValueError: ``side_sms`` out of range, an unknown ``mode``, a non-CUDA
                ``device``.
            RuntimeError: no CUDA device; ``mode="green"`` where green contexts cannot be
                made (the message names the failing driver call).
        """
        if isinstance(side_sms, bool) or not isinstance(side_sms, int):
            raise TypeError(f"side_sms must be an int, got {type(side_sms).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.device = _device(device)
        total = device_sm_count(self.device)
        if not 1 <= side_sms < total:
            raise ValueError(f"side_sms must be in [1, {total - 1}] on this GPU of {total} "
                             f"SMs, got {side_sms}")
        self.fallback_reason: str | None = None
        split = None
        if mode != "streams":
            try:
                split = _green_split(self.device.index, side_sms, bool(fine_grained))
            except GreenContextError as err:
                if mode == "green":
                    raise RuntimeError(f"SmPartition(mode='green'): {err}; mode='streams' "
                                       f"confines only this package's persistent kernels") \
                        from err
                self.fallback_reason = str(err)
        if split is not None:
            self.mode = "green"
            self.side_sms, self.main_sms = split.side_sms, split.main_sms
            self.main_stream = torch.cuda.ExternalStream(int(split.main_stream),
                                                         device=self.device)
            self.side_stream = torch.cuda.ExternalStream(int(split.side_stream),
                                                         device=self.device)
        else:
            self.mode = "streams"
            self.side_sms, self.main_sms = side_sms, total - side_sms
            self.main_stream = torch.cuda.Stream(self.device)
            _, highest = torch.cuda.Stream.priority_range()
            self.side_stream = torch.cuda.Stream(self.device, priority=highest)
        self._outer: list[torch.cuda.Stream] = []

    def __repr__(self) -> str:
        return (f"SmPartition(mode={self.mode!r}, main_sms={self.main_sms}, "
                f"side_sms={self.side_sms}, device={self.device})")

    def __enter__(self) -> SmPartition:
        """Fork: both streams wait for the work queued so far on the current stream."""
        current = torch.cuda.current_stream(self.device)
        for stream in (self.main_stream, self.side_stream):
            stream.wait_stream(current)
        self._outer.append(current)
        return self

    def __exit__(self, *exc) -> None:
        """Join: the stream that was current at ``__enter__`` waits for both."""
        current = self._outer.pop()
        for stream in (self.main_stream, self.side_stream):
            current.wait_stream(stream)

    @contextlib.contextmanager
    def main(self) -> Iterator[torch.cuda.Stream]:
        """Run the block on the main stream, our persistent grids sized to ``main_sms``."""
        with torch.cuda.stream(self.main_stream), \
                sm_budget(self.device, self.main_sms, self.mode == "green"):
            yield self.main_stream

    @contextlib.contextmanager
    def side(self) -> Iterator[torch.cuda.Stream]:
        """Run the block on the side stream, our persistent grids sized to ``side_sms``."""
        with torch.cuda.stream(self.side_stream), \
                sm_budget(self.device, self.side_sms, self.mode == "green"):
            yield self.side_stream

    def run(self, main_fn, side_fn):
        """Run two independent pieces of work side by side.

        Args:
            main_fn: called with no arguments inside ``main()`` (launched first, so a
                persistent kernel holds its SMs before the side work arrives).
            side_fn: called with no arguments inside ``side()``.

        Returns:
            ``(main_fn(), side_fn())``; the current stream has waited for both.
        """
        outer = torch.cuda.current_stream(self.device)
        with self:
            with self.main():
                main_out = main_fn()
            with self.side():
                side_out = side_fn()
        for out in (main_out, side_out):
            _record(out, outer)
        return main_out, side_out


def _record(value, stream: torch.cuda.Stream) -> None:
    """``record_stream`` on every CUDA tensor of ``value`` (a tensor, or a tuple / list of
    them): a tensor allocated on the main or side stream and used after the join on
    ``stream`` must not go back to its pool before ``stream``'s work on it is done."""
    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            value.record_stream(stream)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _record(v, stream)
