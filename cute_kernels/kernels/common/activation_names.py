"""The activation names every layer agrees on (kernels, torch references, ops, CLI), defined
once. No DSL or torch import: the op layer and the CLI read these without loading either."""

from __future__ import annotations

#: epilogue activations (None: identity)
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
#: gated activation -> the activation applied to the gate before it multiplies up
GATED_TO_ACT = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu"}
GATED_ACTIVATIONS = tuple(GATED_TO_ACT)
