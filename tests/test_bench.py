"""The measurement helpers' bookkeeping (CPU only)."""

import shutil
import subprocess

import pytest

import cute_kernels.bench as bench


def test_commit_id_marks_a_tree_that_differs_from_head(tmp_path, monkeypatch):
    """Perf results name the commit measured: HEAD, with "+changes" when tracked files differ
    from it (the device's copy of a newer working tree can sit on an older HEAD), or
    $CK_COMMIT when set."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "tracked.txt").write_text("a")
    git("add", "tracked.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CK_COMMIT", raising=False)
    head = git("rev-parse", "--short", "HEAD")
    assert bench.commit_id() == head
    (tmp_path / "tracked.txt").write_text("b")
    assert bench.commit_id() == f"{head}+changes"
    monkeypatch.setenv("CK_COMMIT", "measured")
    assert bench.commit_id() == "measured"
