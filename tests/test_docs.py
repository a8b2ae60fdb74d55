"""The docs point at files that exist: relative markdown links, backticked source paths, and
the docs named in docstrings and comments. CPU only, no imports of the package."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKDOWN = sorted([ROOT / "README.md", ROOT / "perf" / "RESULTS.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# `kernels/gemm/sm90.py`, `perf/gemm_tuning.py`, `docs/gemm.md`: a path with a folder, ending in
# .py or .md (placeholders such as `cute_kernels/ops/NAME.py` are skipped)
CODE_PATH = re.compile(r"`((?:\.\./)?[\w-]+(?:/[\w.-]+)+\.(?:py|md))`")
DOC_MENTION = re.compile(r"(?<![\w/.-])((?:docs|perf)/[\w.-]+\.md)\b")


def _resolves(path: str, md: Path) -> bool:
    # relative to the markdown file, the repository, or the package (docs say `kernels/...`)
    return any((base / path).exists() for base in (md.parent, ROOT, ROOT / "cute_kernels"))


@pytest.mark.parametrize("md", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_resolve(md):
    broken = []
    for number, line in enumerate(md.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            if not (md.parent / target.split("#")[0]).exists():
                broken.append(f"{number}: ({target})")
        for path in CODE_PATH.findall(line):
            if "NAME" not in Path(path).stem and not _resolves(path, md):
                broken.append(f"{number}: `{path}`")
    assert not broken, f"{md.relative_to(ROOT)}: " + ", ".join(broken)


def test_docs_named_in_source_exist():
    sources = [*(ROOT / "cute_kernels").rglob("*.py"), *(ROOT / "layouts").rglob("*.py"),
               *(ROOT / "perf").glob("*.py"), *(ROOT / "tests").glob("*.py")]
    broken = [f"{path.relative_to(ROOT)}: {doc}" for path in sources
              for doc in DOC_MENTION.findall(path.read_text()) if not (ROOT / doc).exists()]
    assert not broken, broken
