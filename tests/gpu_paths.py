"""The kernel paths a GPU test runs: both on a Hopper GPU (the Ampere path is forced there
with ``force_path``), the Ampere path elsewhere (and, for collection, where there is no GPU:
the tests skip then). Shared by every ``test_*_gpu.py``."""

import torch

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
PATHS = ["hopper", "ampere"] if HOPPER else ["ampere"]
