import pytest
import torch

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine: docs/gpu.md)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
