"""Element masks for block-sparse attention: which keys a query may see inside the key blocks
a block list marks *partial* (FlexAttention's ``mask_mod``).

A mask here is a small hashable value that the kernels compile in (it is part of the compile
cache key) and that torch can evaluate (the float32 reference, and the check that a
``BlockMask``'s own ``mask_mod`` agrees with the mask named). Coordinates are FlexAttention's:
absolute query and key positions, ``q_idx`` in [0, S_q), ``kv_idx`` in [0, S_kv), top-left
aligned (``causal()`` is ``q_idx >= kv_idx``, as FlexAttention's usual causal ``mask_mod``).

* :func:`causal` -- ``q_idx >= kv_idx``;
* :func:`sliding_window` -- causal, and ``q_idx - kv_idx < window``;
* :func:`prefix_lm` -- ``kv_idx < prefix`` or causal;
* :func:`document` -- ``doc[b, q_idx] == doc[b, kv_idx]`` for per-token document ids (packed
  variable-length sequences), passed to the op as ``doc_ids``;
* :func:`custom` -- a CuTe DSL ``@cute.jit`` function ``(b, h, q_idx, kv_idx) -> Boolean``
  traced into the kernel, with an optional torch twin for the reference and the check.

No DSL import here: the kernels' side is ``kernels/attention/mask_mod.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Mask:
    """One element mask (module docstring). ``kind``: "causal", "sliding_window",
    "prefix_lm", "document" or "custom"; ``size``: the window or prefix length;
    ``fn`` / ``torch_fn``: a custom mask's DSL function and its torch twin."""

    kind: str
    size: int = 0
    fn: Callable | None = field(default=None, compare=True)
    torch_fn: Callable | None = field(default=None, compare=False, hash=False)

    @property
    def needs_doc_ids(self) -> bool:
        return self.kind == "document"

    def evaluate(self, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                 kv_idx: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The mask in torch, broadcasting its index tensors (True: the key is visible)."""
        if self.kind == "causal":
            return q_idx >= kv_idx
        if self.kind == "sliding_window":
            return (q_idx >= kv_idx) & (q_idx - kv_idx < self.size)
        if self.kind == "prefix_lm":
            return (kv_idx < self.size) | (q_idx >= kv_idx)
        if self.kind == "document":
            if doc_ids is None:
                raise ValueError("the document mask needs doc_ids")
            return doc_ids[b, q_idx] == doc_ids[b, kv_idx]
        if self.torch_fn is None:
            raise ValueError("this custom mask has no torch_fn: the reference and the "
                             "BlockMask check need one (custom(fn, torch_fn=...))")
        return self.torch_fn(b, h, q_idx, kv_idx)


def causal() -> Mask:
    """``q_idx >= kv_idx`` (top-left aligned, as FlexAttention's causal ``mask_mod``)."""
    return Mask("causal")


def sliding_window(window: int) -> Mask:
    """Causal with a window: ``q_idx >= kv_idx and q_idx - kv_idx < window`` (window >= 1)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    return Mask("sliding_window", window)


def prefix_lm(prefix: int) -> Mask:
    """Bidirectional over the first ``prefix`` keys, causal after: ``kv_idx < prefix or
    q_idx >= kv_idx`` (prefix >= 0)."""
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise ValueError(f"prefix must be an int >= 0, got {prefix!r}")
    return Mask("prefix_lm", prefix)


def document() -> Mask:
    """Keys of the query's own document: ``doc_ids[b, q_idx] == doc_ids[b, kv_idx]``; the op
    takes the int32 ids (B, S) as ``doc_ids`` (self-attention: S_q == S_kv)."""
    return Mask("document")


def custom(fn: Callable, torch_fn: Callable | None = None) -> Mask:
    """A CuTe DSL mask: ``fn`` is a ``@cute.jit`` function ``(b, h, q_idx, kv_idx) ->
    Boolean`` (Int32 arguments) traced into the kernel; ``torch_fn`` the same rule on torch
    index tensors (for the reference and the check against a ``BlockMask``'s mask_mod)."""
    if not callable(fn):
        raise TypeError(f"fn must be a @cute.jit function, got {type(fn).__name__}")
    if torch_fn is not None and not callable(torch_fn):
        raise TypeError(f"torch_fn must be callable, got {type(torch_fn).__name__}")
    return Mask("custom", 0, fn, torch_fn)


#: masks by a small int key: a custom op's schema takes ints, not Mask objects (0: no mask)
_BY_KEY: dict[int, Mask | None] = {0: None}


def key_of(mask: Mask | None) -> int:
    """The int that stands for ``mask`` in a custom op's arguments (``mask_of`` inverts it)."""
    for key, known in _BY_KEY.items():
        if known == mask:
            return key
    key = len(_BY_KEY)
    _BY_KEY[key] = mask
    return key


def mask_of(key: int) -> Mask | None:
    """The mask ``key_of`` gave ``key``."""
    return _BY_KEY[key]
