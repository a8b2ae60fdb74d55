"""The kernel registry and the package's lazy exports: listing imports nothing heavy, yet names
exactly what the ops dispatch between and export."""

import subprocess
import sys

import cute_kernels
from cute_kernels import registry


def test_registry_variants_are_the_ops_variants():
    from cute_kernels.ops import bitpack
    from cute_kernels.ops.activations import GATED_ACTIVATIONS

    table = registry.entries()
    assert table["pack_mask"].variants == table["unpack_mask"].variants == bitpack.VARIANTS
    assert table["gated_mlp_up"].variants == GATED_ACTIVATIONS


def test_lazy_exports_are_complete():
    assert set(cute_kernels.__all__) == set(cute_kernels._EXPORTS) | set(cute_kernels._SUBMODULES)
    for name in cute_kernels.__all__:
        assert getattr(cute_kernels, name) is not None
    assert set(cute_kernels.__all__) <= set(dir(cute_kernels))


def test_import_is_light_and_first_use_loads_every_op():
    code = ("import sys, cute_kernels as ck\n"
            "assert 'torch' not in sys.modules\n"
            "ck.pack_mask\n"
            "import torch\n"
            "assert hasattr(torch.ops.cute_kernels, 'attention')\n"
            "assert hasattr(torch.ops.cute_kernels, 'gemm_nk')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_kernels_do_not_import_tuning():
    """The house's direction (docs/README.md): tuning/ reads kernels' defaults, never the other
    way round (kernels take their configuration from the constructor)."""
    import ast
    from pathlib import Path

    root = Path(cute_kernels.__file__).parent / "kernels"
    bad = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and "tuning" in (node.module or ""):
                bad.append(f"{path.relative_to(root)}: from {node.module}")
    assert not bad, bad
