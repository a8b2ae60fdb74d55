"""The radix-select top-k kernel (kernels/topk.py) compiled for both targets (no GPU needed),
and the checks topk_rows makes before anything compiles."""

import pytest
import torch

from cute_kernels.ops.topk import make_build, topk_rows, vector_width


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, vec", [(torch.bfloat16, 8), (torch.float16, 1),
                                        (torch.float32, 4), (torch.float32, 1)])
def test_topk_kernel_ptx(dtype, vec, target):
    """16-byte row loads when vec > 1 (one per pass: 2 histogram passes over 16-bit keys, 4
    over 32-bit ones, then the write pass), shared-memory atomics for the histograms (one per
    key of a load), warp shuffles for the bin search and the scan, int32 stores of the
    lists; no local memory."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.runtime.compile import compile_ptx

    ptx = compile_ptx(make_build(dtype, vec), target)
    passes = 2 if dtype != torch.float32 else 4
    load = "ld.global.v4.b32" if vec > 1 else "ld.global"
    assert ptx.count(load) == passes + 1, ptx.count(load)
    # the first pass counts every key; each later one only keys matching the chosen bytes
    assert ptx.count("atom.shared.add") == passes * vec
    assert "shfl.sync.down" in ptx and "shfl.sync.up" in ptx
    assert ptx.count("st.global.b32") == vec
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, target)


def test_vector_width_needs_aligned_rows():
    x = torch.empty(4, 64, dtype=torch.bfloat16)
    assert vector_width(x) == (8 if x.data_ptr() % 16 == 0 else 1)
    assert vector_width(x[:, 1:57]) == 1          # misaligned start
    assert vector_width(x[:, :60]) == 1           # N not a multiple of 8
    assert vector_width(torch.empty(4, 64)) in (1, 4)


def test_topk_rows_rejects_bad_input_before_compiling():
    with pytest.raises(TypeError, match="scores"):
        topk_rows(torch.zeros(2, 8, dtype=torch.int32), 1)
    with pytest.raises(ValueError, match="scores"):
        topk_rows(torch.zeros(8), 1)
    with pytest.raises(ValueError, match="k must be <= N = 8"):
        topk_rows(torch.zeros(2, 8), 9)
    with pytest.raises(ValueError, match="k"):
        topk_rows(torch.zeros(2, 8), 0)
    with pytest.raises(TypeError, match="k"):
        topk_rows(torch.zeros(2, 8), 2.0)
    with pytest.raises(ValueError, match="CUDA"):  # a CPU tensor on the direct route
        topk_rows(torch.zeros(2, 8), 2)


@pytest.mark.parametrize("hist_copies", [None, 8])
def test_wide_digit_variant_ptx(hist_copies):
    """digit_bits=11 (perf/topk_tuning.py): a float32 row read three times plus the write
    pass; no local memory or spills."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.runtime.compile import compile_ptx

    cfg = {"digit_bits": 11} | ({"hist_copies": hist_copies} if hist_copies else {})
    ptx = compile_ptx(make_build(torch.float32, 4, **cfg), "sm_90a")
    assert ptx.count("ld.global.v4.b32") == 3 + 1
    assert "ld.local" not in ptx
    _assert_no_spills(ptx, "sm_90a")


def test_digit_options_are_checked():
    from cute_kernels.kernels.topk import TopkRows

    assert TopkRows(32, 4, digit_bits=11).digits == [(21, 11), (10, 11), (0, 10)]
    assert TopkRows(16, 8).digits == [(8, 8), (0, 8)]
    with pytest.raises(ValueError, match="digit_bits"):
        TopkRows(32, 4, digit_bits=12)
    with pytest.raises(ValueError, match="hist_copies"):
        TopkRows(32, 4, hist_copies=3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, vec, buffer", [(torch.float32, 4, 4096),
                                                (torch.bfloat16, 8, 16384),
                                                (torch.float16, 1, 4096)])
def test_sampled_candidates_ptx(dtype, vec, buffer, target):
    """The sampled-candidates build keeps the exact path (its passes + 1 row loads) and adds
    one scalar load per sample per thread, the candidates' read (``unroll`` loads, and as
    many prefetched), and one histogram atomic per pass for each of the two shared-memory
    selects (the sample's and the candidates'); no local memory or spills."""
    from test_ptx import _assert_no_spills  # tests/ is on pytest's path

    from cute_kernels.runtime.compile import compile_ptx

    build = make_build(dtype, vec, candidates=buffer)
    kernel = build.fn
    ptx = compile_ptx(build, target)
    passes = 2 if dtype != torch.float32 else 4
    if vec > 1:
        assert ptx.count("ld.global.v4.b32") == passes + 1 + 2 * kernel.unroll
        scalar = ptx.count("ld.global.b32" if dtype == torch.float32 else "ld.global.b16")
        assert scalar == kernel.samples // kernel.threads
    else:
        assert ptx.count("ld.global.b16") == (passes + 1 + 2 * kernel.unroll
                                              + kernel.samples // kernel.threads)
    assert ptx.count("atom.shared.add") == passes * vec + 2 * passes
    assert "ld.local" not in ptx and "st.local" not in ptx
    _assert_no_spills(ptx, target)


def test_sampled_candidates_plan():
    """tuning/topk.py: the issue's shapes take the sampled candidates (the 4096-key buffer up
    to ~35k columns at 7%, the 16,384-key one at 118,784), short rows and large k the radix
    select; the threshold's rank is a few sigma above the sample's expected count."""
    from cute_kernels.tuning.topk import EXACT, SAMPLES, topk_plan

    assert topk_plan(32768, 2294).candidates == 4096
    assert topk_plan(16384, 1147).candidates == 4096
    big = topk_plan(118784, 8315)
    assert big.candidates == 16384 and 0.07 * SAMPLES < big.sample_rank < 0.1 * SAMPLES
    assert topk_plan(118784, 23757).candidates == 0  # 20%: ~30k candidates fit no buffer
    assert topk_plan(4096, 300) == EXACT and topk_plan(50000, 50000) == EXACT
    with pytest.raises(ValueError, match="candidates"):
        from cute_kernels.kernels.topk import TopkRows

        TopkRows(32, 4, candidates=1000)


def emulate_sampled_count(x, k, plan):
    """kernels/topk.py steps 4-5 in torch: the kernel's sample columns (stride + hashed
    jitter), the ``sample_rank``-th largest sample as threshold, the keys at or above it."""
    from cute_kernels.kernels.topk import SAMPLES

    r, n = x.shape
    span = n // SAMPLES
    i = torch.arange(SAMPLES, dtype=torch.int64)
    jitter = ((i * 2654435761) % (1 << 32) >> 8) % span
    sample = x[:, i * span + jitter]
    threshold = sample.topk(plan.sample_rank, dim=1).values[:, -1:]
    return (x >= threshold).sum(1)


@pytest.mark.parametrize("kind", ["normal", "heavy", "smooth", "periodic"])
def test_sampled_threshold_holds_the_top_k(kind):
    """The sampling plan on the host (the kernel's sample columns emulated): over 300 rows of
    smooth, heavy-tailed, random-walk and periodic scores the candidates hold the top k and
    fit the buffer in every row, so the exact fallback stays rare."""
    from cute_kernels.tuning.topk import topk_plan

    g = torch.Generator().manual_seed(11)
    n, k = 32768, 2294
    x = torch.randn(300, n, generator=g)
    if kind == "heavy":
        x = torch.exp(2 * x)
    elif kind == "smooth":
        x = x.cumsum(1)
    elif kind == "periodic":  # a pattern whose period divides the sample stride
        x = torch.sin(torch.arange(n) * (2 * torch.pi / 16)).expand(300, n) + 1e-3 * x
    plan = topk_plan(n, k)
    found = emulate_sampled_count(x, k, plan)
    assert bool((found >= k).all()) and bool((found <= plan.candidates).all()), (
        int(found.min()), int(found.max()))
