"""``CacheOffloader``: per-layer tensors kept in pinned host memory and streamed back to the
GPU one layer ahead (issue 16; Chipmunk Part III pipelines its masks and caches this way).

    off = CacheOffloader()                 # on the current CUDA device
    off.put(layer, act_cache)              # device -> pinned host, on the side stream
    off.prefetch(layer + 1)                # host -> device, overlapping this layer's compute
    act_cache = off.get(layer)             # waits only for that layer's copy

Copies run on one side stream. ``put`` waits (on the side stream) for the work the current
stream has queued, so it copies the finished tensor. ``get`` makes the current stream wait
for the copy of the layer it returns. ``record_stream`` keeps both sides' memory alive while
the other stream uses it, so nothing is freed under a running copy. A pinned buffer is kept
per layer and reused while the shape and dtype stay the same. At most ``ahead`` layers are
prefetched at a time; a ``get`` without a prefetch copies on the spot.

Exported as ``cute_kernels.CacheOffloader``; tests/test_offload_gpu.py passes on the H100 and
perf/offload.py measures the hidden share of the PCIe time (perf/RESULTS.md).
"""

from __future__ import annotations

import torch

__all__ = ["CacheOffloader"]


class CacheOffloader:
    """Per-layer tensors in pinned host memory, prefetched to one CUDA device on a side
    stream (module docstring). ``ahead``: how many layers may be on their way at once."""

    def __init__(self, device: torch.device | str | int | None = None, *, ahead: int = 2):
        if not torch.cuda.is_available():
            raise RuntimeError("CacheOffloader needs a CUDA device (it moves tensors between "
                               "pinned host memory and a GPU)")
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 1:
            raise ValueError(f"ahead must be an int >= 1, got {ahead!r}")
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"device must be a CUDA device, got {self.device}")
        self.ahead = ahead
        self.stream = torch.cuda.Stream(self.device)
        self._host: dict[object, torch.Tensor] = {}
        self._stored: dict[object, torch.cuda.Event] = {}   # layer -> its put's copy done
        self._coming: dict[object, tuple[torch.Tensor, torch.cuda.Event]] = {}

    def put(self, layer, tensor: torch.Tensor) -> None:
        """Copy ``tensor`` (on this device) into the layer's pinned buffer, asynchronously:
        work queued on the current stream after ``put`` must not write ``tensor`` (the copy
        may still be reading it; freeing it is safe)."""
        if not isinstance(tensor, torch.Tensor) or tensor.device != self.device:
            raise ValueError(f"put takes a tensor on {self.device}, got "
                             f"{getattr(tensor, 'device', type(tensor).__name__)}")
        host = self._host.get(layer)
        if host is None or host.shape != tensor.shape or host.dtype != tensor.dtype:
            host = self._pinned(layer, tensor)
        self._coming.pop(layer, None)  # a prefetched copy of the old contents is stale
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            host.copy_(tensor, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        tensor.record_stream(self.stream)
        self._stored[layer] = done

    def prefetch(self, layer) -> None:
        """Start copying the layer's tensor to the device (no-op if already on its way)."""
        if layer in self._coming:
            return
        host = self._host.get(layer)
        if host is None:
            raise KeyError(f"no tensor was put for layer {layer!r}")
        while len(self._coming) >= self.ahead:  # drop the oldest prefetch (it stays valid)
            self._coming.pop(next(iter(self._coming)))
        with torch.cuda.stream(self.stream):
            stored = self._stored.get(layer)
            if stored is not None:
                self.stream.wait_event(stored)  # the host copy must be complete
            dev = torch.empty(host.shape, dtype=host.dtype, device=self.device)
            dev.copy_(host, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        self._coming[layer] = (dev, ready)

    def get(self, layer) -> torch.Tensor:
        """The layer's tensor on the device, ready for the current stream's work."""
        if layer not in self._coming:
            self.prefetch(layer)
        dev, ready = self._coming.pop(layer)
        current = torch.cuda.current_stream(self.device)
        current.wait_event(ready)
        dev.record_stream(current)
        return dev

    def host_bytes(self) -> int:
        """Pinned host memory held."""
        return sum(t.numel() * t.element_size() for t in self._host.values())

    def _pinned(self, layer, like: torch.Tensor) -> torch.Tensor:
        nbytes = like.numel() * like.element_size()
        try:
            host = torch.empty(like.shape, dtype=like.dtype, pin_memory=True)
        except RuntimeError as err:
            raise RuntimeError(f"cannot allocate {nbytes / 2**20:.1f} MiB of pinned host "
                               f"memory for layer {layer!r} ({self.host_bytes() / 2**30:.2f} "
                               f"GiB already held): {err}. Free other pinned buffers, lower "
                               f"the number of offloaded layers, or keep this layer on the "
                               f"GPU") from err
        self._host[layer] = host
        return host
