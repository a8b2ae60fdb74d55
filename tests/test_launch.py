"""Kernel arguments by name (runtime/launch.py): fake build arguments and runtime calls are
ordered by the kernel's ``__call__`` signature, and a disagreement raises."""

import json
import subprocess
import sys

import pytest
import torch

from cute_kernels.ops import attention as attention_ops
from cute_kernels.ops import bitpack as bitpack_ops
from cute_kernels.ops import column_sparse_mlp as column_sparse_mlp_ops
from cute_kernels.ops import gemm as gemm_ops
from cute_kernels.runtime.launch import KernelParams, kernel_params, launch_args


class _Kernel:
    def __call__(self, mA, mB, scale, stream, mC=None, mD=None):
        pass


class _ValueDefault:
    def __call__(self, mA, stream, tile=128):
        pass


class _Reordered:
    def __call__(self, mB, mA, scale, stream, mC=None, mD=None):
        pass


def test_launch_args_follow_the_kernel_signature():
    from cutlass.cute.runtime import make_fake_stream

    k = _Kernel()
    args = launch_args(k, mB="b", scale=1.0, mA="a")
    assert args[:3] == ("a", "b", 1.0) and len(args) == 4  # stream filled, defaults left out
    assert type(args[3]) is type(make_fake_stream(use_tvm_ffi_env_stream=True))
    assert launch_args(k, mA="a", mB="b", scale=1.0, mC="c")[4] == "c"
    with pytest.raises(TypeError, match="mC left out before 'mD'"):
        launch_args(k, mA="a", mB="b", scale=1.0, mD="d")
    with pytest.raises(TypeError, match="unknown argument.*'mX'"):
        launch_args(k, mA="a", mB="b", scale=1.0, mX="x")
    with pytest.raises(TypeError, match="no value for parameter 'scale'"):
        launch_args(k, mA="a", mB="b")


def test_call_args_drop_the_stream_and_take_every_parameter():
    p = kernel_params(_Kernel)
    assert p.call_args(mD=4, mC=3, scale=2, mB=1, mA=0) == (0, 1, 2, 3, 4)
    assert kernel_params(_Reordered).call_args(mD=4, mC=3, scale=2, mB=1, mA=0) == (1, 0, 2, 3, 4)
    # a loaded kernel takes no defaults: call_args passes None for a None default left out
    assert p.call_args(mA=0, mB=1, scale=2, mC=3) == (0, 1, 2, 3, None)
    assert p.call_args(mA=0, mB=1, scale=2) == (0, 1, 2, None, None)
    with pytest.raises(TypeError, match="no value for parameter 'scale'"):
        p.call_args(mA=0, mB=1, mC=3)
    with pytest.raises(TypeError, match="only parameters whose default is None"):
        kernel_params(_ValueDefault).call_args(mA=0)
    with pytest.raises(TypeError, match="every parameter but the stream"):
        p.call_args(mA=0, mB=1, scale=2, mC=3, mD=4, stream=5)
    with pytest.raises(TypeError, match="unknown argument.*'mX'"):  # never dropped silently
        p.call_args(mA=0, mB=1, scale=2, mX=4)
    with pytest.raises(TypeError, match="no value for parameter 'mA'"):
        p.call_args(mX=0, mB=1, scale=2, mC=3, mD=4)
    with pytest.raises(TypeError, match="disagree"):
        KernelParams(_Kernel, _Reordered)


def test_tail_is_what_call_args_put_after_the_per_call_arguments():
    p = kernel_params(_Kernel)
    assert p.tail(("mA", "mB"), scale=2, mD=4) == (2, None, 4)
    assert (0, 1, *p.tail(("mA", "mB"), scale=2, mD=4)) == p.call_args(mA=0, mB=1, scale=2, mD=4)
    assert kernel_params(_Reordered).tail(("mB", "mA", "scale")) == (None, None)
    with pytest.raises(TypeError, match="must be its first parameters, in order"):
        p.tail(("mB", "mA"), scale=2)
    with pytest.raises(TypeError, match="no value for parameter 'scale'"):
        p.tail(("mA", "mB"))
    with pytest.raises(TypeError, match="unknown argument.*'mX'"):
        p.tail(("mA",), mB=1, scale=2, mX=3)


def test_every_op_kernel_family_shares_one_signature():
    """An op calls its kernels on both paths with one argument list; the op modules' fake
    builds agree with their kernels (launch_args raises otherwise)."""
    from cute_kernels.registry import entries

    assert gemm_ops.gemm_params().call_names == ("mA", "mB", "mC", "mBias", "num_ctas", "mSync")
    assert attention_ops.attention_params().call_names == (
        "mQ", "mK", "mV", "mO", "mLSE", "mPrevLSE", "mColsum", "mIndices", "mCounts", "scale",
        "out_scale", "mFullIndices", "mFullCounts", "mDocIds", "mTileOrder", "num_ctas")
    for entry in entries().values():
        for variant in entry.variants:
            for path in ("hopper", "ampere"):
                build = entry.build(variant, path)
                params = kernel_params(type(build.fn))
                required = sum(not d for d in params.has_default)
                # trailing parameters with defaults may be left out of a build
                assert required <= len(build.args) <= len(params.names), entry.name


def test_gemm_plan_is_named():
    plan = gemm_ops.GemmPlan((4, 8), torch.bfloat16, None, 0, False)
    assert plan.shape == (4, 8) and plan.kernel is None and plan.drift is False


def _named_kernels() -> list[str]:
    """Every kernel class an op names by path."""
    named = list(attention_ops.ATTENTION_KERNELS)
    named += [attention_ops.SPLIT_KV_KERNEL, attention_ops.SPLIT_COMBINE_KERNEL]
    named += [gemm_ops.SPLIT_KERNEL]
    named += [f"{bitpack_ops.KERNEL_MODULE}:{c}" for c in bitpack_ops.KERNEL_CLASSES.values()]
    named += list(gemm_ops.GEMM_KERNELS)
    named += list(column_sparse_mlp_ops.MLP_KERNELS.values())
    return named


def test_parameters_read_from_source_match_the_classes():
    """The call path reads kernel parameters from source (no DSL import); they must be what
    ``inspect`` sees on the imported class, inherited ``__call__`` included."""
    import importlib

    from cute_kernels.runtime.launch import _parameters, _source_parameters

    for path in _named_kernels():
        module, _, name = path.partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert _source_parameters(module, name) == _parameters(cls), path


CALL_PATH_CHILD = r"""
import json, sys
import torch
import cute_kernels as ck
from cute_kernels.ops import attention, bitpack, column_sparse, gated_mlp, gemm  # noqa: F401
from cute_kernels.ops import column_sparse_mlp
import cute_kernels.modules, cute_kernels.column_sparse_module  # noqa: F401
import cute_kernels.column_sparse_mlp_module, cute_kernels.offload  # noqa: F401
from cute_kernels.runtime.launch import kernel_params
names = [attention.attention_params().call_names, gemm.gemm_params().call_names,
         attention.split_kv_params().call_names, gemm.split_params().call_names]
names += [kernel_params(f"{bitpack.KERNEL_MODULE}:{c}").call_names
          for c in bitpack.KERNEL_CLASSES.values()]
names += [kernel_params(c).call_names for c in column_sparse_mlp.MLP_KERNELS.values()]
for d in (64, 128):  # attention_colsum asks this before every launch
    for g in (128, 192):
        attention.colsum_adds_onto_zeros("hopper", d, g)
print(json.dumps({"dsl": sorted(m for m in sys.modules if m.split(".")[0] == "cutlass")[:5],
                  "names": names}))
"""


def test_op_modules_and_kernel_parameters_do_not_import_the_dsl():
    """What a call with a warm disk cache runs (the op modules, the kernel parameter lists)
    must not import ``cutlass``: that import alone is more than issue 18's 0.3 s budget."""
    proc = subprocess.run([sys.executable, "-c", CALL_PATH_CHILD], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["dsl"] == [], got
    assert ["mQ", "mK", "mV", "mO"] == got["names"][0][:4]
