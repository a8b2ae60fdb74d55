import os
import subprocess
import sys
import textwrap

import pytest

import cute_kernels
from cute_kernels.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(cute_kernels.__file__)))


def run_cli(*args: str, setup: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """``cute-kernels ARGS`` in a fresh interpreter (after ``setup``), as a user runs it."""
    code = textwrap.dedent(f"""\
        import sys
        {setup}
        from cute_kernels.cli import main
        sys.exit(main({list(args)!r}))
        """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, **(env or {})})


def assert_one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit status 2, nothing on stdout, one ``cute-kernels: error:`` line, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cute-kernels: error: "), r.stderr
    assert "Traceback" not in r.stderr and not r.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


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
    err = capsys.readouterr().err
    # every name --list shows, the swizzles included, and what N may be
    assert "unknown layout" in err and "swizzle_128B" in err and "sm80_gated_c" in err
    assert "sm90_gated_c_n<N>" in err and "multiple of 8 from 8 to 256" in err
    assert main(["layout", "sm90_gated_c_n12"]) == 2
    assert "multiple of 8" in capsys.readouterr().err


def test_layout_list_says_what_n_is(capsys):
    assert main(["layout", "--list"]) == 0
    out = capsys.readouterr().out
    assert "sm90_gated_c_n<N>" in out and "N a multiple of 8 from 8 to 256" in out
    assert "swizzle_32B" in out and "layouts.sm80_gated_c" in out


def test_swizzle_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sw.png"
    assert main(["layout", "swizzle_64B", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_large_layout_png_is_compact(tmp_path, capsys):
    """The 64x256 wgmma accumulator (16384 cells) is drawn without labels, within the cap."""
    pytest.importorskip("matplotlib")
    from PIL import Image

    from layouts.visualize import MAX_PNG_PIXELS, png_geometry

    out = tmp_path / "c.png"
    assert main(["layout", "sm90_wgmma_c_n256", "--out", str(out)]) == 0
    size = Image.open(out).size
    assert max(size) <= MAX_PNG_PIXELS and out.stat().st_size < 1_000_000, size
    assert png_geometry(64, 256)[2] is False and png_geometry(16, 4)[2] is True


@pytest.mark.parametrize("args, fragments", [
    (["layout", "sm80_gated_c", "--out", "/nonexistent/x.svg"], ["/nonexistent", "does not exist"]),
    (["layout", "swizzle_128B", "--out", "/nonexistent/x.png"], ["does not exist"]),
    (["layout", "sm80_gated_c", "--out", "x.pdf"], [".svg or .png"]),
    (["layout", "nope"], ["unknown layout", "swizzle_32B"]),
    # refused before compiling: the missing folder, a bad arch, kernel or variant
    (["ptx", "pack_mask", "--out", "/nonexistent/x.ptx"], ["/nonexistent", "does not exist"]),
    (["ptx", "pack_mask", "--arch", "sm_75"], ["sm_90a"]),
    (["ptx", "nope"], ["unknown kernel", "attention_colsum"]),
    (["ptx", "pack_mask", "--variant", "diagonal"], ["flat, rows"]),
])
def test_errors_are_one_line_without_traceback(args, fragments):
    assert_one_line_error(run_cli(*args), *fragments)


def test_png_without_matplotlib_is_a_clean_error(tmp_path):
    r = run_cli("layout", "sm80_gated_c", "--out", str(tmp_path / "g.png"),
                setup="sys.modules['matplotlib'] = None  # as if it were not installed")
    assert_one_line_error(r, "matplotlib", ".svg")
    assert not (tmp_path / "g.png").exists()


def test_ptx_out_error_comes_before_any_compile(monkeypatch, capsys):
    import cute_kernels.registry as registry

    def no_compile(*a, **k):
        raise AssertionError("compiled before checking --out")

    monkeypatch.setattr(registry, "ptx_for", no_compile)
    assert main(["ptx", "gemm", "--out", "/nonexistent/g.ptx"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_ptx_list_columns_align(capsys):
    assert main(["ptx", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [ln.split()[0] for ln in lines]
    assert "attention_colsum" in names
    # every summary starts in the same column, the longest name included
    assert len({ln.index(ln.split()[1], len(ln.split()[0])) for ln in lines}) == 1


def test_help_is_plain_text_and_states_the_defaults():
    r = run_cli("--help")
    assert r.returncode == 0 and "``" not in r.stdout and "cute-kernels ptx" in r.stdout
    r = run_cli("ptx", "--help")
    assert r.returncode == 0 and "default: sm_90a" in r.stdout and "KERNEL" in r.stdout
    assert "kernel name" in r.stdout
    r = run_cli("layout", "--help")
    assert ".png with matplotlib" in r.stdout


def test_cache_info_says_when_the_disk_cache_is_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUTE_KERNELS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUTE_KERNELS_DISK_CACHE", "0")
    assert main(["cache", "info"]) == 0
    assert "disk cache is off" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--help"], ["ptx", "--list"], ["layout", "--list"],
                                  ["cache", "info"], ["layout", "sm80_gated_c", "--out", "{tmp}"]])
def test_quick_commands_import_neither_torch_nor_the_dsl(args, tmp_path):
    """What keeps them fast (timed by perf/cli_startup.py, not here): no torch, no DSL."""
    args = [a.format(tmp=tmp_path / "g.svg") for a in args]
    code = textwrap.dedent(f"""\
        import sys
        from cute_kernels.cli import main
        try:
            main({args!r})
        except SystemExit:
            pass
        heavy = sorted(m for m in ("torch", "cutlass", "numpy", "tvm_ffi") if m in sys.modules)
        assert not heavy, heavy
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr


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
    """The installed entry point (python -m) runs the no-GPU demo: the PTX instruction mix,
    here of the two bitpack kernels (every registry build is compiled for both targets by
    test_ptx.py::test_ptx_instructions, which the full report repeats)."""
    r = subprocess.run([sys.executable, "-m", "cute_kernels", "demo", "--cpu",
                        "--kernel", "pack_mask", "--kernel", "unpack_mask"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln.split()[0] for ln in r.stdout.splitlines()
            if ln.strip().startswith(("pack_mask", "unpack_mask", "gemm"))]
    assert rows.count("pack_mask") == rows.count("unpack_mask") == 4  # 2 variants x 2 archs
    assert "gemm" not in rows
    assert "ld.global.v4" in r.stdout and "sm_90a" in r.stdout


def test_demo_kernel_filter_names_the_choices(capsys):
    """An unknown ``demo --kernel`` fails before anything compiles, naming the kernels."""
    assert main(["demo", "--cpu", "--kernel", "nope"]) != 0
    err = capsys.readouterr().err
    assert "nope" in err and "pack_mask" in err and "gemm" in err


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUTE_KERNELS_CACHE_DIR", str(tmp_path))
    (tmp_path / "abc.o").write_bytes(b"x" * 10)
    (tmp_path / "abc.lock").write_text("")
    assert main(["cache", "info"]) == 0
    assert "1 kernels" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 files" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_schedule_command(capsys):
    """``cute-kernels schedule``: the GEMM schedule, with swap-AB / split-K where chosen."""
    from cute_kernels.cli import main

    assert main(["schedule", "1", "4096", "14336"]) == 0
    line = capsys.readouterr().out
    assert "swap-AB" in line and "tile 64x16x128" in line and "C^T stored into out" in line
    assert main(["schedule", "7", "1024", "14336"]) == 0
    line = capsys.readouterr().out
    assert "swap-AB" in line and "split-K 4" in line and "fp32 workspace + reduce" in line
    assert main(["schedule", "4096", "4096", "4096"]) == 0
    line = capsys.readouterr().out
    assert "split-K" not in line and "stages" not in line  # the kernel's default depth
    assert main(["schedule", "512", "4096", "14336"]) == 0  # a long K loop on 128x128
    assert "tile 128x128x64, cluster 2x1, 128 CTAs, up to 6 pipeline stages" in (
        capsys.readouterr().out)
    assert main(["schedule", "13", "4096", "14336", "--gated"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("gated_mlp_up") and "swap-AB" not in line
    assert "tile 64x128x128" in line and "16 rows of A loaded per tile" in line
    assert main(["schedule", "100", "4096", "14336", "--gated"]) == 0
    assert "rows of A" not in capsys.readouterr().out
    assert main(["schedule", "0", "8", "8"]) == 2
    assert "M must be >= 1" in capsys.readouterr().err


def test_attention_schedule_command(capsys):
    """``cute-kernels attention-schedule``: the route ``attention`` takes (the one
    ``make_plan`` follows): GQA packing and split-KV for decoding, the persistent tiles per
    head dim, and clean errors for shapes the op refuses."""
    from cute_kernels.cli import main

    assert main(["attention-schedule", "1", "32", "8", "1", "65536", "128"]) == 0
    line = capsys.readouterr().out
    assert "GQA" in line and "split-KV 16 ways" in line and "swap-AB decode tiles (8" in line
    assert main(["attention-schedule", "1", "32", "8", "8", "65536", "128"]) == 0
    assert "64 x 128 tiles" in capsys.readouterr().out  # 32 packed rows: the 64-row tile
    assert main(["attention-schedule", "1", "32", "8", "1", "16384", "128"]) == 0
    out = capsys.readouterr().out  # fewer keys: 8 splits, each tile's a cluster
    assert "split-KV 8 ways" in out and "DSMEM" in out and "holds them all at once" in out
    # 64k keys: 64 swap-AB CTAs keep up with an H100's and an H200's memory, not a faster one
    for hbm, ways in (("3352", "8 ways"), ("4915", "8 ways"), ("6000", "16 ways")):
        assert main(["attention-schedule", "1", "32", "8", "1", "65536", "128", "--hbm-gbps",
                     hbm]) == 0
        assert f"split-KV {ways}" in capsys.readouterr().out
    assert main(["attention-schedule", "1", "32", "8", "1", "65536", "128", "--hbm-gbps",
                 "0"]) == 2
    assert "--hbm-gbps must be > 0" in capsys.readouterr().err
    assert main(["attention-schedule", "8", "32", "32", "4096", "4096", "64"]) == 0
    line = capsys.readouterr().out
    assert "192 x 128 tiles, 3 consumer warpgroups" in line and "persistent" in line
    assert main(["attention-schedule", "32", "32", "32", "1024", "1024", "64", "--causal"]) == 0
    line = capsys.readouterr().out
    assert "64 x 128 tiles" in line and "2 CTAs per SM" in line and "causal" in line
    assert main(["attention-schedule", "2", "16", "16", "8192", "16384", "128"]) == 0
    assert "one CTA per tile" in capsys.readouterr().out  # past PERSISTENT_MAX_KEYS
    assert main(["attention-schedule", "1", "32", "8", "1", "65536", "128", "--path",
                 "ampere"]) == 0
    assert "Ampere kernel" in capsys.readouterr().out
    assert main(["attention-schedule", "1", "32", "7", "1", "100", "128"]) == 2
    assert "multiple of H_KV" in capsys.readouterr().err
    assert main(["attention-schedule", "1", "32", "8", "1", "100", "96"]) == 2
    assert "D must be one of" in capsys.readouterr().err


def test_demo_kernel_filter_needs_the_cpu_report(monkeypatch, capsys):
    """On a GPU machine ``demo --kernel`` without ``--cpu`` says the filter belongs to the
    no-GPU report instead of running the GPU demo unfiltered."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["demo", "--kernel", "pack_mask"]) != 0
    assert "--cpu" in capsys.readouterr().err
