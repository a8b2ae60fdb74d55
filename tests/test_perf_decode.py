"""perf/decode.py's pure-Python helpers on the CPU: the split heuristic, the shapes and n swept,
the per-shape summary, the float32 reference, and the no-GPU exit and ``--plan``. The timing
itself needs a GPU (docs/gpu.md)."""

import math

import pytest
import torch
from perf_scripts import load_perf_script  # tests/ is on pytest's path

from cute_kernels import reference as ref

decode = load_perf_script("decode")


@pytest.mark.parametrize("b, s_q, s_kv, sms, expected", [
    # the op packs the 4 query heads of a KV head into one tile at these S_q: 8 tiles per
    # batch entry (32 without packing)
    (1, 1, 4096, 132, 8),      # 8 tiles: capped at 8 splits of 4 blocks (7 is 0.875 of it)
    (1, 8, 131072, 132, 16),   # 128 CTAs, 0.97 of a wave (14: 0.85)
    (4, 1, 65536, 132, 4),     # 32 tiles: 4 splits make 128 CTAs (0.97 of a wave)
    (16, 1, 131072, 132, 1),   # 128 tiles: a wave already (2 splits: 1.94 waves, no better)
    (1, 1, 4096, 78, 8),
    (1, 1, 256, 132, 1),       # 2 key blocks: fewer than 4 per split at n = 2
    (1, 1, 1024, 132, 2),      # 8 key blocks: capped at 2 splits of 4
    (1, 200, 65536, 132, 2),   # S_q >= a tile: not packed, 2 query tiles per head: 64 tiles
])
def test_splits_heuristic(b, s_q, s_kv, sms, expected):
    assert decode.splits_heuristic(b, 8, s_q, s_kv, sms, q_per_kv=4) == expected


def test_auto_splits_leaves_short_keys_unsplit():
    """``attention(num_splits=None)``: no split below MIN_AUTO_SPLIT_KEYS keys (at 2k keys a
    split lost eager on the H200: host-bound), the heuristic's n above it."""
    from cute_kernels.ops.attention_splits import MIN_AUTO_SPLIT_KEYS, auto_splits

    assert decode.auto_splits is auto_splits
    assert auto_splits(1, 8, 1, MIN_AUTO_SPLIT_KEYS - 1, 132, q_per_kv=4) == 1
    assert decode.splits_heuristic(1, 8, 1, MIN_AUTO_SPLIT_KEYS - 1, 132, q_per_kv=4) > 1
    for s_kv in (MIN_AUTO_SPLIT_KEYS, 65536):
        n = auto_splits(1, 8, 1, s_kv, 132, q_per_kv=4)
        assert n > 1 and n == decode.splits_heuristic(1, 8, 1, s_kv, 132, q_per_kv=4)
    assert auto_splits(16, 8, 1, 131072, 132, q_per_kv=4) == 1  # a wave of tiles already


def test_splits_heuristic_bounds():
    for b in (1, 2, 3, 4, 16):
        for s_kv in (128, 1000, 4096, 65536, 131072):
            for sms in (8, 78, 114, 132):
                n = decode.splits_heuristic(b, 8, 1, s_kv, sms, q_per_kv=4)
                blocks = -(-s_kv // 128)
                assert 1 <= n <= max(1, blocks // 4)
                assert n == 1 or 8 * b * n <= 2 * sms  # 8 packed tiles per batch entry


def test_splits_heuristic_follows_the_ops_packing_rule():
    """Causal S_q = 8 is not packed (the op's rule): 32 tiles at B 1, as before packing."""
    assert decode.splits_heuristic(1, 8, 8, 65536, 132, q_per_kv=4, causal=True) == 4
    assert decode.splits_heuristic(1, 8, 8, 65536, 132, q_per_kv=4) > 4


def test_shapes_and_splits_swept():
    assert len(decode.shapes(False)) == 24 and len(decode.shapes(True)) == 8
    assert decode.shapes(True)[:3] == [(1, 1, 4096), (16, 1, 4096), (1, 1, 65536)]
    assert decode.shapes(True, s_q=(8,), s_kv=(512,), batch=(2,)) == [(2, 8, 512)]
    assert decode.split_candidates(4096) == [1, 2, 4, 8, 16, 32]
    assert decode.split_candidates(300) == [1, 2]  # the op caps n at ceil(S_kv / 128) = 3
    assert decode.label(16, 8, 131072) == "B16 Sq8 Skv128k" and decode.label(1, 1, 300) == \
        "B1 Sq1 Skv300"
    # the largest shape: K and V 8.6 GB per set; the rotation keeps 2 sets (under ~30 GB)
    big = decode.set_bytes(16, 8, 131072)
    assert big > 8.5e9 and decode.n_sets(big, 2) == 2 and decode.n_sets(10**6, 120) == 120
    assert decode.n_sets(12 * 10**9, 9) == 2


def test_summarize():
    ms = {"SDPA-cuDNN": 0.20, "SDPA-flash": 0.10, "cute n=1": 0.40, "cute n=2": 0.25,
          "cute n=4": 0.08, "cute n=8": 0.05}
    s = decode.summarize(ms, [1, 2, 4, 8], heuristic=4, wrong={"cute n=8"})
    assert s["sdpa"] == "SDPA-flash" and s["sdpa_ms"] == 0.10
    assert s["best_n"] == 4 and s["best_vs_sdpa"] == pytest.approx(1.25)
    assert s["heuristic_n"] == 4 and s["heuristic_vs_best"] == pytest.approx(1.0)
    s = decode.summarize({"cute n=1": 0.4}, [1, 2], heuristic=2)
    assert s["sdpa"] is None and math.isnan(s["best_vs_sdpa"]) and math.isnan(s["heuristic_ms"])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s_q", [1, 3])
def test_reference_matches_the_library_reference(causal, s_q):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, s_q, 64, generator=g).bfloat16()
    k, v = (torch.randn(2, 2, 77, 64, generator=g).bfloat16() for _ in range(2))
    expected = ref.attention(q, k, v, causal=causal)
    got = decode.reference(q, k, v, causal)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert decode.relative_error(expected.bfloat16(), got) < 1e-2
    assert decode.relative_error(torch.zeros_like(q), got) == pytest.approx(1.0)


def test_fails_fast_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        decode.main(["--quick"])


def test_plan_runs_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    decode.main(["--plan", "--quick", "--s-q", "1"])
    out = capsys.readouterr().out
    assert "SMs 132" in out and "B1 Sq1 Skv4k" in out and "B16 Sq1 Skv64k" in out
    with pytest.raises(SystemExit):
        decode.main(["--plan", "--splits", "0"])


def test_auto_splits_fill_the_gpu_at_short_keys():
    """The picks measured on the H200 (perf/RESULTS.md "Decode attention"): a few KV heads at
    4k keys split until their tiles fill about a wave; a wave of tiles (B16) stays whole;
    2k keys stay whole."""
    from cute_kernels.ops.attention_splits import auto_splits

    assert auto_splits(1, 8, 1, 4096, 132, q_per_kv=4) == 8  # graphs 0.042 -> 0.016 ms
    assert auto_splits(1, 8, 8, 4096, 132, q_per_kv=4) == 8
    assert auto_splits(1, 8, 1, 65536, 132, q_per_kv=4) == 16  # H100 0.101 -> 0.099 ms
    assert auto_splits(4, 8, 1, 4096, 132, q_per_kv=4) == 4  # graphs 0.043 -> 0.025 ms
    assert auto_splits(16, 8, 1, 4096, 132, q_per_kv=4) == 1
    assert auto_splits(1, 8, 1, 2048, 132, q_per_kv=4) == 1  # eager 0.030 against 0.042
