"""perf/column_sparse.py runs end to end on the CPU at a tiny size, with the GPU pieces replaced
(the ops by the float32 references rounded to bf16, CUDA events by a host clock), so the GPU
session finds a script that works. CPU only; the timings mean nothing here."""

import json
import time

import pytest
import torch
from perf_scripts import load_perf_script  # tests/ is on pytest's path

import cute_kernels as ck
import cute_kernels.bench as bench
import cute_kernels.column_sparse_module as csm
import cute_kernels.ops.column_lists as ops_lists
import cute_kernels.ops.column_sparse as ops_cs
from cute_kernels import reference as ref


class HostEvent:
    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def attention(q, k, v, *, scale=None, return_lse=False):
    o, lse = ref.attention(q, k, v, scale=scale, return_lse=True)
    return (o.to(q.dtype), lse) if return_lse else o.to(q.dtype)


def attention_colsum(q, k, v, prev_lse, *, group=192, scale=None):
    o, lse, colsum = ref.attention_colsum(q, k, v, prev_lse, group=group, scale=scale)
    return o.to(q.dtype), lse, colsum


def column_sparse_attention(q, k, v, indices, counts, *, group=192, scale=None, out=None,
                            accumulate=False, out_scale=1.0):
    o = ref.column_sparse_attention(q, k, v, indices, counts, group=group, scale=scale,
                                    out=out, accumulate=accumulate, out_scale=out_scale)
    return o.to(q.dtype) if out is None else out.copy_(o)


def column_lists(packed, counts, n, width):
    """The column-lists kernel's result, on the CPU: selected columns, then the others."""
    full = torch.argsort((~ref.unpack_mask(packed, n)).to(torch.uint8), dim=-1, stable=True)
    return full[..., :width].to(torch.int32)


def column_counts(packed, n, multiple_of=1):
    """The counts kernel's result, on the CPU: counts, padded counts, their maximum."""
    counts = ref.unpack_mask(packed, n).sum(-1, dtype=torch.int32)
    padded = ((counts + multiple_of - 1) // multiple_of * multiple_of).clamp(max=n)
    return counts, padded, padded.max().reshape(1)


def test_fails_fast_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        load_perf_script("column_sparse").main(["--quick"])


def test_runs_end_to_end_on_a_tiny_size(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    script = load_perf_script("column_sparse")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(bench, "l2_bytes", lambda device=None: 1 << 16)
    monkeypatch.setattr(script, "device_name", lambda: "cpu")
    ck.attention  # noqa: B018  (loads the exports, so the patch below sticks)
    monkeypatch.setattr(ck, "attention", attention)
    monkeypatch.setattr(ops_cs, "column_sparse_attention", column_sparse_attention)
    for name, fn in (("attention", attention), ("attention_colsum", attention_colsum),
                     ("column_sparse_attention", column_sparse_attention),
                     ("pack_mask", ref.pack_mask)):
        monkeypatch.setattr(csm, name, fn)
    monkeypatch.setattr(ck, "pack_mask", ref.pack_mask)
    monkeypatch.setattr(ops_lists, "column_lists", column_lists)
    monkeypatch.setattr(ops_lists, "column_counts", column_counts)
    for name, value in (("DEVICE", "cpu"), ("H", 2), ("D", 64),
                        ("TOPK_EXTRA_SHAPES", ((4, 5000),))):  # N > 4096: the sampled path
        monkeypatch.setattr(script, name, value)
    script.main(["--seq", "500", "--steps", "7", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "all columns (p = 0): gather / our dense" in out and "skip SDPA-cuDNN" in out
    payload = json.loads((tmp_path / "column_sparse.json").read_text())
    sweep, topk, steps = payload["sweep"], payload["topk"], payload["steps"]
    assert payload["lists"]["equal"] and "of copy bandwidth" in out
    # p = 0 has one counts rule (every column), the others two
    assert [(r[0], r[1]) for r in sweep["rows"]][:3] == [(0.0, "exact"), (0.8, "exact"),
                                                         (0.8, "x128")]
    assert all(r[-1] < 2e-2 for r in sweep["rows"])  # the spot check (bf16 rounding here)
    assert len(topk["rows"]) == 4 and all(r[-2] == 1.0 for r in topk["rows"])
    kinds = [r[1] for r in steps["rows"]]
    assert kinds == ["dense", "dense", "sparse", "sparse", "sparse", "dense", "sparse"]
    assert all(r[-1] for r in steps["rows"])  # mask and lists give the same outputs
    sparse = [r for r in steps["rows"] if r[1] == "sparse"]
    assert all(r[6] < r[7] for r in sparse)  # the delta beats reusing the last dense output
    for png in ("column_sparse_speedup.png", "column_sparse_steps.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
