"""Small helpers around the CuTe DSL itself (not kernels)."""

from __future__ import annotations

import contextlib
import warnings

from cutlass.base_dsl.ast_helpers import DSLOptimizationWarning


@contextlib.contextmanager
def python_unrolled():
    """Silences the DSL's "This static loop has N iterations" advice for one fragment loop.

    The loops over a thread's accumulator fragment (128 values at 128x256) are unrolled in
    Python on purpose: ``cutlass.range(..., unroll_full=True)``, the advice, compiles to other
    code (ptxas: different SASS on sm_80 for the GEMM epilogue's ``visit`` and on both archs
    for ``gate_pairs``), which would need re-measuring. Imports the warning class from the
    DSL's ``base_dsl.ast_helpers`` (4.8): a DSL upgrade that moves it fails here, loudly.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This static loop has",
                                category=DSLOptimizationWarning)
        yield


def with_batch_mode(t):
    """A GEMM operand as (rows, K, L): a rank-2 (rows, K) tensor gets a batch mode of one
    (stride 0), at trace time, so the op passes plain 2-D tensors (three host-side
    ``unsqueeze`` views cost ~1.5 us each per call, more than a small GEMM's launch)."""
    import cutlass.cute as cute

    if cute.rank(t.layout) == 3:
        return t
    return cute.make_tensor(t.iterator, cute.append(t.layout, cute.make_layout(1, stride=0)))
