"""Loading a perf/ script as a module, for the CPU tests of its pure-Python parts."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_perf_script(name: str):
    """``perf/<name>.py`` as a fresh module named ``perf_<name>`` (perf/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"perf_{name}", ROOT / "perf" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
