"""SmPartition's CPU side (issue 16): argument errors before any CUDA call, and the SM budget
its regions set, which every persistent grid of the package is sized by."""

import pytest
import torch

from cute_kernels.partition import SmPartition
from cute_kernels.runtime import arch


def test_arguments_are_checked_before_cuda():
    with pytest.raises(TypeError, match="side_sms must be an int"):
        SmPartition(8.0)
    with pytest.raises(TypeError, match="side_sms must be an int"):
        SmPartition(True)
    with pytest.raises(ValueError, match="mode must be one of"):
        SmPartition(8, mode="mps")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            SmPartition(8)


def test_budget_sizes_grids_and_nests(monkeypatch):
    dev0, dev1 = torch.device("cuda", 0), torch.device("cuda", 1)
    monkeypatch.setitem(arch._SM_COUNT, 0, 132)
    monkeypatch.setitem(arch._SM_COUNT, 1, 132)
    assert arch.sm_count(dev0) == 132 and arch.confining_grid(dev0) is None
    with arch.sm_budget(dev0, 124, confined=True):
        assert arch.sm_count(dev0) == 124
        assert arch.confining_grid(dev0) is None  # green: the hardware confines
        assert arch.sm_count(dev1) == 132  # another device keeps all its SMs
        with arch.sm_budget(dev0, 8, confined=False):
            assert arch.sm_count(dev0) == 8
            assert arch.confining_grid(dev0) == 8  # streams: the kernel must confine itself
        assert arch.sm_count(dev0) == 124
    assert arch.sm_count(dev0) == 132 and arch.device_sm_count(dev0) == 132
