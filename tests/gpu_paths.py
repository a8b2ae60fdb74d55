"""The kernel paths a GPU test runs: both on a Hopper GPU (the Ampere path is forced there
with ``force_path``), the Ampere path elsewhere (and, for collection, where there is no GPU:
the tests skip then). Shared by every ``test_*_gpu.py``."""

import os

import torch

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
PATHS = ["hopper", "ampere"] if HOPPER else ["ampere"]


def gen():
    """A CUDA generator with a fresh seed: every run draws new inputs."""
    return torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))


def poison_allocator():
    """Fill freed cached memory with NaN so the ops' fresh outputs and internal buffers start
    poisoned."""
    junk = torch.full((64 << 20,), float("nan"), device="cuda")
    del junk
