import pytest
import torch
from gpu_paths import PATHS

HAS_GPU = torch.cuda.is_available()


@pytest.fixture(params=PATHS)
def path(request):
    """A test taking ``path`` runs on each kernel path this GPU has (ck.force_path)."""
    import cute_kernels as ck

    with ck.force_path(request.param):
        yield request.param


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (see docs/gpu.md)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def forced_drift_limiter(monkeypatch):
    """Turns the GEMM's wave drift limiter on for every shape and records each launch's tile
    counter with the work it should count; ``check()`` asserts that every Hopper launch's
    counter ended at its number of cluster tiles (one release add per cluster and tile), i.e.
    the limiter really ran."""
    import cute_kernels.ops.gemm as gemm_ops
    import cute_kernels.tuning.gemm as gemm_tuning
    from cute_kernels.kernels.common.tile_scheduler import cluster_tiles
    from cute_kernels.runtime.arch import device_target

    monkeypatch.setattr(gemm_tuning, "DRIFT_MIN_WAVES", 1)
    monkeypatch.setattr(gemm_tuning, "DRIFT_MIN_K_TILES", 1)
    # stream-K never displaces it (the kernel runs one or the other)
    monkeypatch.setattr(gemm_tuning, "STREAM_K_OVER_DRIFT", float("inf"))
    import cute_kernels.ops.gated_mlp as gated_ops

    monkeypatch.setattr(gemm_ops, "_PLANS", {})  # plans made under the real thresholds
    monkeypatch.setattr(gated_ops, "_PLANS", {})
    launches, schedules = [], []
    real_schedule, real_counter = gemm_ops.schedule, gemm_ops.drift_counter

    def schedule(a, b_nk, **kwargs):
        plan = real_schedule(a, b_nk, **kwargs)
        batch = a.shape[0] if a.dim() == 3 else 1
        schedules.append(cluster_tiles(a.shape[-2], b_nk.shape[-2], batch, plan.tile,
                                       plan.cluster_m))
        return plan

    def drift_counter(device, drift):
        counter = real_counter(device, drift)
        assert drift, "the limiter was not turned on"
        launches.append((counter, schedules[-1], device_target(device)[0]))
        return counter

    monkeypatch.setattr(gemm_ops, "schedule", schedule)
    monkeypatch.setattr(gemm_ops, "drift_counter", drift_counter)

    class Check:
        @staticmethod
        def check():
            assert launches
            for counter, units, path in launches:
                assert counter.item() == (units if path == "hopper" else 0), (units, path)

    return Check


class _CustomOpCalls:
    """A TorchDispatchMode recording every call of a ``namespace`` custom op that reaches
    torch's dispatcher (whatever the route: the op object, ``torch.ops``, autograd)."""

    def __init__(self, namespace: str = "cute_kernels"):
        from torch.utils._python_dispatch import TorchDispatchMode

        calls = self.calls = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace == namespace:
                    calls.append(func.name())
                return func(*args, **(kwargs or {}))

        self._mode = Mode()

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


@pytest.fixture
def custom_op_calls():
    """``with custom_op_calls() as c: ...`` then ``c.calls``: the custom ops dispatched."""
    return _CustomOpCalls
