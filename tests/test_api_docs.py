"""``help(ck.<name>)`` is useful for every public name: a docstring of several lines that names
each argument (not a ``*args, **kwargs`` wrapper whose docstring got lost), what it returns and
what it raises. CPU only: reads signatures and docstrings."""

import inspect
import pydoc
import re
from pathlib import Path

import pytest

import cute_kernels as ck

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = [n for n in ck.__all__ if inspect.isfunction(getattr(ck, n))]
MIN_LINES = 5


def _mentions(doc: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", doc) is not None


def _check_documents_arguments(fn, *, skip=("self", "cls")) -> None:
    doc = inspect.getdoc(fn)
    assert doc, f"{fn.__qualname__} has no docstring"
    assert len(doc.splitlines()) >= MIN_LINES, f"{fn.__qualname__}: docstring too short"
    params = inspect.signature(fn).parameters.values()
    wrapped = [p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert not wrapped, f"{fn.__qualname__} takes {wrapped}: a wrapper hiding the real signature"
    missing = [p.name for p in params if p.name not in skip and not _mentions(doc, p.name)]
    assert not missing, f"{fn.__qualname__}'s docstring does not mention {missing}"


def test_every_public_name_is_covered():
    """The lists below cover ``__all__``: a new public name needs a docstring check too."""
    covered = set(FUNCTIONS) | {"CacheOffloader", "ColumnSparseAttention", "ColumnSparseMLP",
                                "GatedMLP", "SmPartition", "UnsupportedGPUError", "masks",
                                "reference"}
    assert set(ck.__all__) == covered


@pytest.mark.parametrize("name", FUNCTIONS)
def test_public_function_docstring_names_arguments_returns_and_errors(name):
    fn = getattr(ck, name)
    assert fn.__module__.startswith("cute_kernels."), fn.__module__
    _check_documents_arguments(fn)
    doc = inspect.getdoc(fn)
    assert "Raises:" in doc, f"{name}: no Raises section"
    if name != "force_path":  # a context manager: nothing to return
        assert "Returns:" in doc, f"{name}: no Returns section"
    # what help() prints: the signature and the docstring, not a wrapper's
    text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    assert name in text and doc.splitlines()[0] in text


@pytest.mark.parametrize("method", ["__init__", "forward", "from_llama"])
def test_gated_mlp_methods_document_their_arguments(method):
    _check_documents_arguments(getattr(ck.GatedMLP, method))


@pytest.mark.parametrize("method", ["__init__", "run"])
def test_sm_partition_methods_document_their_arguments(method):
    _check_documents_arguments(getattr(ck.SmPartition, method))


@pytest.mark.parametrize("method", ["__init__", "forward"])
def test_column_sparse_module_methods_document_their_arguments(method):
    _check_documents_arguments(getattr(ck.ColumnSparseAttention, method))


def test_class_and_module_docstrings():
    for obj in (ck.GatedMLP, ck.ColumnSparseAttention, ck.SmPartition, ck.UnsupportedGPUError,
                ck.reference, ck.masks):
        doc = inspect.getdoc(obj)
        assert doc and len(doc.splitlines()) >= MIN_LINES, obj
    text = pydoc.render_doc(ck.GatedMLP, renderer=pydoc.plaintext)
    assert "hidden: the model width" in text and "dtype=torch.bfloat16" in text


@pytest.mark.parametrize("name", [n for n in dir(ck.reference)
                                  if not n.startswith("_")
                                  and inspect.isfunction(getattr(ck.reference, n))
                                  and getattr(ck.reference, n).__module__ == ck.reference.__name__])
def test_reference_functions_have_docstrings(name):
    fn = getattr(ck.reference, name)
    assert inspect.getdoc(fn), f"cute_kernels.reference.{name} has no docstring"
    assert name in ck.__all__ or name in ck.reference.NOT_YET_PUBLIC, \
        f"reference.{name} has no op of the same name"


def test_no_unnamed_write_up_citations_in_the_package():
    """Posts are cited by title ("Towards Fused Kernels for Gated MLP", Chipmunk Part III),
    never as a bare "the write-up"."""
    found = [f"{p.relative_to(ROOT)}:{i}"
             for folder in ("cute_kernels", "layouts")
             for p in sorted((ROOT / folder).rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if "write-up" in line]
    assert not found, found
