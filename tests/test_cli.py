import subprocess
import sys

import pytest

from cute_kernels.cli import main


def test_layout_svg(tmp_path, capsys):
    out = tmp_path / "gated.svg"
    assert main(["layout", "sm80_gated_c", "--out", str(out)]) == 0
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.count("<rect") == 16 * 4
    assert "T0 V0" in svg and "T31 V1" in svg


def test_layout_png_and_list(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "c.png"
    assert main(["layout", "sm90_wgmma_c_n16", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["layout", "--list"]) == 0
    assert "sm80_mma_a" in capsys.readouterr().out


def test_layout_swizzle(tmp_path):
    out = tmp_path / "sw.svg"
    assert main(["layout", "swizzle_128B", "--out", str(out)]) == 0
    assert out.read_text().count("<rect") == 64


def test_layout_unknown_is_a_clean_error(capsys):
    assert main(["layout", "nope"]) == 2
    assert "unknown layout" in capsys.readouterr().err


def test_ptx_list_and_out(tmp_path, capsys):
    assert main(["ptx", "--list"]) == 0
    assert "pack_mask" in capsys.readouterr().out
    out = tmp_path / "k.ptx"
    assert main(["ptx", "unpack_mask", "--arch", "sm_80", "--variant", "flat",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert ".target sm_80" in text and "st.global.v4" in text
    assert main(["ptx", "pack_mask", "--arch", "sm_75"]) == 2


def test_console_script_demo_cpu():
    """The installed entry point (python -m) runs the no-GPU demo: the PTX instruction mix."""
    r = subprocess.run([sys.executable, "-m", "cute_kernels", "demo", "--cpu"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.strip().startswith(("pack_mask",
                                                                            "unpack_mask"))]
    assert len(lines) == 8  # 2 kernels x 2 variants x 2 archs
    assert "ld.global.v4" in r.stdout and "sm_90a" in r.stdout


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUTE_KERNELS_CACHE_DIR", str(tmp_path))
    (tmp_path / "abc.o").write_bytes(b"x" * 10)
    (tmp_path / "abc.lock").write_text("")
    assert main(["cache", "info"]) == 0
    assert "1 kernels" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 files" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())
