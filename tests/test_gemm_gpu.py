"""gemm / linear on the GPU against an fp32 reference on upcast inputs: fresh random inputs,
poisoned outputs, error no worse than 2x torch's own half-precision matmul."""

import pytest
import torch
from gpu_paths import PATHS  # tests/ is on pytest's path

import cute_kernels as ck
from cute_kernels.ops.gemm import _epilogue_reference

pytestmark = pytest.mark.gpu


POISON = float("nan")


def rand(*shape, dtype=torch.bfloat16):
    return (torch.randn(*shape, device="cuda") / 4).to(dtype)


def operand(shape, major, dtype):
    """A fresh random (..., R, K) operand whose unit stride is on K ('k') or on R."""
    if major == "k":
        return rand(*shape, dtype=dtype)
    t = rand(*shape[:-2], shape[-1], shape[-2], dtype=dtype)
    return t.transpose(-1, -2)


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check(out, ref, torch_out, what):
    assert not torch.isnan(out).any(), f"{what}: unwritten (NaN-poisoned) or NaN outputs"
    ours, theirs = rel_err(out, ref), rel_err(torch_out, ref)
    assert ours <= 2 * theirs + 1e-6, f"{what}: rel err {ours:.2e} vs torch {theirs:.2e}"


def run_gemm(path, m, n, k, *, batch=None, a_major="k", b_major="n", dtype=torch.bfloat16,
             out_dtype=None, bias=False, epilogue=None):
    lead = (batch,) if batch else ()
    a = operand((*lead, m, k), a_major, dtype)
    # b is (K, N): 'n' = row-major (unit stride on N), 'k' = column-major
    b = operand((*lead, n, k), "k" if b_major == "k" else "m", dtype).transpose(-1, -2)
    bias_t = rand(n, dtype=dtype) if bias else None
    od = out_dtype or dtype
    out = torch.full((*lead, m, n), POISON, dtype=od, device="cuda")
    with ck.force_path(path):
        ck.gemm(a, b, out=out, bias=bias_t, epilogue=epilogue)
    ref = _epilogue_reference(a.float() @ b.float(), bias_t, epilogue)
    torch_out = _epilogue_reference((a @ b).float(), bias_t, epilogue).to(od)
    check(out, ref, torch_out, f"{path} {lead}+({m},{n},{k}) {a_major}{b_major} {epilogue}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("size", [128, 256, 1024, 4096])
def test_squares(path, size):
    run_gemm(path, size, size, size)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (7, 2048, 4096), (64, 8192, 1024),
                                     (1000, 1000, 1000), (333, 264, 136), (129, 8, 8),
                                     (300, 136, 40)])
def test_skinny_and_residues(path, m, n, k):
    run_gemm(path, m, n, k)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("a_major, b_major", [("k", "k"), ("k", "n"), ("m", "k"), ("m", "n")])
def test_operand_majors(path, a_major, b_major):
    run_gemm(path, 200, 328, 264, a_major=a_major, b_major=b_major)


@pytest.mark.parametrize("path", PATHS)
def test_batched(path):
    run_gemm(path, 257, 136, 64, batch=3)
    run_gemm(path, 64, 512, 256, batch=2, a_major="m", b_major="k")



@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("epilogue", [None, "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [False, True])
def test_epilogues(path, epilogue, bias):
    run_gemm(path, 300, 520, 256, bias=bias, epilogue=epilogue)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype, out_dtype", [(torch.float16, None), (torch.bfloat16,
                                              torch.float32), (torch.float16, torch.float32)])
def test_dtypes(path, dtype, out_dtype):
    run_gemm(path, 260, 384, 192, dtype=dtype, out_dtype=out_dtype)


@pytest.mark.parametrize("path", PATHS)
def test_linear_matches_torch(path):
    x, w, bias = rand(2, 37, 512), rand(768, 512), rand(768)
    with ck.force_path(path):
        y = ck.linear(x, w, bias)
    ref = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    check(y, ref, torch.nn.functional.linear(x, w, bias).float(), f"{path} linear")
    assert y.shape == (2, 37, 768)


def test_torch_compile_fullgraph():
    @torch.compile(fullgraph=True)
    def mlp(x, w1, w2):
        return ck.linear(ck.linear(x, w1, epilogue="silu"), w2)

    x, w1, w2 = rand(64, 256), rand(512, 256), rand(256, 512)
    ref = (torch.nn.functional.silu(x.float() @ w1.float().t()).bfloat16().float()
           @ w2.float().t())
    eager = ck.linear(ck.linear(x, w1, epilogue="silu"), w2)
    check(mlp(x, w1, w2), ref, eager.float(), "torch.compile linear chain")


def test_gemm_rejects_bad_shapes_before_launch():
    a = rand(64, 100)
    with pytest.raises(ValueError, match="N and K must be multiples of 8"):
        ck.gemm(a, rand(100, 64))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        ck.gemm(rand(64, 64), rand(72, 64))
    with pytest.raises(ValueError, match="16-byte boundary"):
        ck.gemm(rand(64, 65)[:, 1:], rand(64, 64))


HOPPER_ONLY = pytest.mark.skipif("hopper" not in PATHS, reason="needs a Hopper (sm_90) GPU")


@HOPPER_ONLY
def test_plain_plans_take_2d_operands_batched_ones_views():
    """Hopper plans of 2-D operands hand the kernel the tensors themselves (it adds the
    batch mode of one: ``plan.flat``), batched ones their (rows, K, L) views; both right,
    with M-major and N-major operands."""
    import cute_kernels.ops.gemm as gemm_ops

    gemm_ops._PLANS.clear()
    run_gemm("hopper", 200, 328, 264, a_major="m", b_major="n")
    run_gemm("hopper", 257, 136, 64, batch=3)
    flat = {len(plan.shape) == 2: plan.flat for plan in gemm_ops._PLANS.values()}
    assert flat == {True: True, False: False}, flat


@HOPPER_ONLY
@pytest.mark.parametrize("tile", [(128, 192, 64), (128, 128, 64), (128, 256, 64),
                                  (128, 224, 64), (128, 64, 64), (64, 128, 64),
                                  (64, 256, 64),
                                  # built, not scheduled: three consumers; 16-wide subtiles
                                  (192, 192, 64), (192, 160, 64), (128, 240, 64)])
@pytest.mark.parametrize("m, n, k, a_major, b_major", [(333, 520, 136, "k", "n"),
                                                       (1000, 776, 1000, "m", "k"),
                                                       (128, 392, 64, "k", "n")])
def test_every_hopper_tile(monkeypatch, tile, m, n, k, a_major, b_major):
    """Each tile the scheduler may pick (it picks by shape), and the kernel's other tile forms
    (192 rows on three consumer warpgroups, a 240-wide tile stored in 16-wide subtiles),
    forced on residue shapes, with and without a cluster (M = 128 launches unclustered)."""
    import cute_kernels.tuning.gemm as gemm_tuning

    monkeypatch.setattr(gemm_tuning, "pick_tile", lambda *args: tile)
    run_gemm("hopper", m, n, k, a_major=a_major, b_major=b_major, bias=True, epilogue="silu")
    run_gemm("hopper", m, n, k, batch=2)


@HOPPER_ONLY
@pytest.mark.parametrize("tile", [(128, 224, 64), (128, 256, 64), (128, 240, 64),
                                  (128, 192, 64), (256, 160, 64)])
def test_c_ring_across_tiles(forced_schedule, tile):
    """The epilogue's C ring (one buffer per subtile, as many as the stages leave room for:
    6 of a 224-wide tile's 7, 4 of 8 at 256, 10 of 15 at 240, all 3 at 192, 4 of 5 at 256 x
    160) on 8 CTAs that walk many tiles each: a subtile that reuses a buffer waits for the
    store that read it, a tile's first subtile for the tile before's stores. Residue shapes,
    bias + SiLU, both majors of B, K of one and of several k-tiles."""
    forced_schedule(swap=False, splits=1, tile=tile, cluster_m=2, ctas=8)
    run_gemm("hopper", 1000, 1544, 136, a_major="k", b_major="n", bias=True, epilogue="silu")
    run_gemm("hopper", 700, 1000, 64, a_major="k", b_major="k")


@HOPPER_ONLY
@pytest.mark.parametrize("tile", [(256, 160, 64), (256, 128, 64), (256, 144, 64)])
@pytest.mark.parametrize("cluster_m, cluster_n", [(2, 1), (1, 1), (1, 2)])
def test_256_row_tiles(forced_schedule, tile, cluster_m, cluster_n):
    """256-row tiles (two consumer warpgroups, each two m64 rows of WGMMAs; 32-wide subtiles
    at N 160 and 128, each subtile taking values of both WGMMA rows, 16-wide at 144): residue
    shapes with both operand majors, bias + SiLU, batched, CTAs past M, in
    2x1 clusters (B shared), 1x2 (A shared, 128 rows each) and without; fp32 out (the
    whole-tile store, both WGMMA rows) where its fp32 tile fits beside two stages (256 x
    128)."""
    forced_schedule(swap=False, splits=1, tile=tile, cluster_m=cluster_m, cluster_n=cluster_n,
                    batched=True)
    run_gemm("hopper", 333, 520, 136, a_major="k", b_major="n", bias=True, epilogue="silu")
    run_gemm("hopper", 1000, 776, 1000, a_major="m", b_major="k")
    run_gemm("hopper", 600, 392, 64, batch=2)
    if tile[1] <= 128:
        run_gemm("hopper", 1000, 776, 200, dtype=torch.float16, out_dtype=torch.float32)


@HOPPER_ONLY
@pytest.mark.parametrize("tile", [(128, 176, 64), (128, 128, 64), (64, 256, 64)])
@pytest.mark.parametrize("cluster_m, cluster_n", [(2, 1), (1, 1), (1, 2)])
def test_pingpong(monkeypatch, forced_schedule, tile, cluster_m, cluster_n):
    """Pingpong consumers (each consumer warpgroup a whole tile, alternate tiles of the
    walk; its own C ring, barrier and store warp; the mainloops take turns) on 8 CTAs: many
    tiles per warpgroup, tile counts that leave warpgroup 1 one tile short, CTAs with no tile
    (the 1 x 2-tile launch), K of one k-tile, of a partial one and of several times the ring,
    both operand majors, bias + SiLU, batched, in 2x1, 1x2 and no clusters; fp32 out falls
    back to the cooperative kernel."""
    import cute_kernels.ops.gemm as gemm_ops

    forced_schedule(swap=False, splits=1, tile=tile, cluster_m=cluster_m, cluster_n=cluster_n,
                    ctas=8, batched=True, pingpong=True)
    keys, real = [], gemm_ops.kernel_for  # the Hopper compile keys the launches ask for
    monkeypatch.setattr(gemm_ops, "kernel_for", lambda device, key, build, hopper_key=():
                        keys.append(hopper_key) or real(device, key, build, hopper_key))
    run_gemm("hopper", 1000, 1544, 136, a_major="k", b_major="n", bias=True, epilogue="silu")
    run_gemm("hopper", 1000, 1544, 1000, a_major="m", b_major="k")
    run_gemm("hopper", 333, 1000, 64, a_major="k", b_major="k")
    run_gemm("hopper", 700, 392, 200, batch=2)
    run_gemm("hopper", 100, 200, 1000)
    assert keys and all("pingpong" in key for key in keys), keys
    run_gemm("hopper", 300, 520, 136, dtype=torch.float16, out_dtype=torch.float32)
    assert "pingpong" not in keys[-1], keys[-1]


def test_repeat_calls_reuse_the_plan_but_still_validate():
    """The second call with the same metadata skips validation; new values still give new
    results, and a misaligned view of a validated shape is still rejected."""
    x, w = rand(96, 64), rand(128, 64)
    first = ck.linear(x, w)
    x2 = rand(96, 64)
    torch.testing.assert_close(ck.linear(x2, w).float(), (x2 @ w.t()).float(), rtol=2e-2,
                               atol=2e-2)
    assert not torch.equal(first, ck.linear(x2, w))
    buf = rand(96 * 64 + 8)
    misaligned = buf[4:4 + 96 * 64].view(96, 64)  # same shape/strides, 8-byte offset
    with pytest.raises(ValueError, match="16-byte boundary"):
        ck.linear(misaligned, w)


@pytest.mark.parametrize("path", PATHS)
def test_drift_limiter_forced(forced_drift_limiter, path):
    """The wave drift limiter (on by default only for many waves of long-K tiles) forced on
    small residue shapes: same results, on both paths (Ampere takes and ignores the counter).
    Many waves per cluster (small tiles of work) exercise the wait and the counter, which
    must end at the number of cluster tiles on Hopper."""
    run_gemm(path, 4000, 2056, 200, bias=True, epilogue="silu")
    run_gemm(path, 136, 4104, 72, a_major="m")
    run_gemm(path, 2000, 1040, 136, batch=3)
    forced_drift_limiter.check()


# ------------------------- skinny schedules: swap-AB and split-K -------------------------

DECODE_SHAPES = [(m, n, k) for m in (1, 7, 13, 32) for n, k in ((14336, 4096), (4096, 14336))]


@HOPPER_ONLY
@pytest.mark.parametrize("m, n, k", DECODE_SHAPES + [(7, 1000, 14336), (7, 1000, 4096),
                                                     (64, 4096, 14336), (128, 4096, 14336),
                                                     (333, 1024, 4096), (48, 14336, 4096),
                                                     (768, 1024, 8192), (1000, 1000, 2048)])
def test_skinny_shapes_default_schedule(m, n, k):
    """Decode shapes take a swap-AB / split-K / 64-row-tile schedule by themselves (asserted),
    and match the reference (the 4096-row weights, 7 x 1000 x 14336 split 4 ways and 7 x 1000
    x 4096 unsplit, on 64-row swapped tiles with 8 stages); M = 48 runs 64-row tiles; 128 x
    4096 x 14336, 64 x 4096 x 14336, 333 x 1024 x 4096, 768 x 1024 x 8192 and 1000 x 1000 x
    2048 split K in clusters of two."""
    from cute_kernels.ops.gemm import schedule

    x, w = rand(m, k), rand(n, k)
    assert schedule(x, w) != schedule(x, w, skinny=False), (m, n, k)  # not the plain one
    bias = rand(n)
    out = torch.full((m, n), POISON, dtype=torch.bfloat16, device="cuda")
    ck.linear(x, w, bias, out=out, epilogue="gelu_tanh")
    ref = _epilogue_reference(x.float() @ w.float().t(), bias, "gelu_tanh")
    check(out, ref, _epilogue_reference((x @ w.t()).float(), bias, "gelu_tanh").bfloat16(),
          f"linear {m}x{n}x{k}")


@HOPPER_ONLY
def test_long_k_deep_ring_default_schedule():
    """500 x 4000 x 8200 takes 128x128 tiles with the 6-stage ring of long-K loops by itself
    (asserted; ``tuning.gemm.LONG_K_STAGES``), with N, M and K residues, bias and GELU."""
    from cute_kernels.ops.gemm import schedule

    m, n, k = 500, 4000, 8200
    x, w, bias = rand(m, k), rand(n, k), rand(n)
    plan = schedule(x, w)
    assert (plan.tile, plan.max_stages) == ((128, 128, 64), 6), plan
    out = torch.full((m, n), POISON, dtype=torch.bfloat16, device="cuda")
    ck.linear(x, w, bias, out=out, epilogue="gelu_tanh")
    ref = _epilogue_reference(x.float() @ w.float().t(), bias, "gelu_tanh")
    check(out, ref, _epilogue_reference((x @ w.t()).float(), bias, "gelu_tanh").bfloat16(),
          f"linear {m}x{n}x{k}")


@pytest.fixture
def forced_schedule(monkeypatch):
    """``force(swap=..., splits=..., tile_n=...)``: every following GEMM plan uses that
    schedule (residue shapes the heuristic would not split); ``batched=True``: batched
    GEMMs too (their plans ask for the unswapped, unsplit schedule, ``skinny=False``)."""
    import cute_kernels.ops.gemm as gemm_ops
    import cute_kernels.tuning.gemm as gemm_tuning

    real = gemm_tuning.schedule

    def force(*, swap: bool, splits: int, tile_n: int = 16, cluster_m: int = 1, tile=None,
              cluster_k: int = 1, ctas: int | None = None, cluster_n: int = 1,
              batched: bool = False, stream_k: bool = False, pingpong: bool = False):
        def schedule(m, n, k, batch, sms, skinny=True, cluster_split=True, gated=False):
            base = real(m, n, k, batch, sms, skinny=False, gated=gated)
            if gated or (not skinny and not batched):
                return base
            t = (tile or (128, tile_n, 64)) if swap else tile or base.tile
            if cluster_k > 1 and not cluster_split:  # fp32 out: the workspace's K slices
                ok = cluster_k in gemm_tuning.split_options(k)
                return gemm_tuning.GemmSchedule(t, 1, sms, False, splits=cluster_k if ok else 1)
            size = (1 if swap else cluster_m * cluster_n) * cluster_k
            return gemm_tuning.GemmSchedule(t, 1 if swap else cluster_m,
                                            ctas or sms // size * size, False, swap=swap,
                                            splits=splits, max_stages=8, cluster_k=cluster_k,
                                            cluster_n=1 if swap else cluster_n,
                                            stream_k=stream_k, pingpong=pingpong,
                                            pdl=cluster_k > 1 and gemm_tuning.CLUSTER_SPLIT_PDL)

        monkeypatch.setattr(gemm_ops, "_PLANS", {})
        monkeypatch.setattr(gemm_tuning, "schedule", schedule)

    return force


@HOPPER_ONLY
@pytest.mark.parametrize("swap, splits, tile_n, m, n, k, a_major, b_major, epilogue", [
    (True, 1, 16, 1, 520, 136, "k", "k", None),  # swap alone, K one k-tile and a bit
    (True, 3, 16, 7, 1000, 264, "k", "n", "gelu"),  # slices of 88: partial k-tiles
    (True, 2, 32, 32, 392, 4096, "m", "k", "silu"),  # x M-major, 32-column tile
    (True, 1, 32, 29, 392, 4096, "k", "n", "gelu_tanh"),  # swapped, written transposed
    (True, 5, 32, 29, 776, 1000, "k", "n", None),  # 5 slices of 200
    (False, 3, 0, 333, 776, 264, "k", "n", "relu"),  # unswapped, idle half cluster
    (False, 2, 0, 1000, 520, 4096, "m", "n", None),
])
def test_forced_skinny_schedules(forced_schedule, swap, splits, tile_n, m, n, k, a_major,
                                 b_major, epilogue):
    forced_schedule(swap=swap, splits=splits, tile_n=tile_n, cluster_m=2)
    run_gemm("hopper", m, n, k, a_major=a_major, b_major=b_major, bias=True, epilogue=epilogue)
    run_gemm("hopper", m, n, k, a_major=a_major, b_major=b_major, dtype=torch.float16,
             out_dtype=torch.float32)


@HOPPER_ONLY
def test_cluster_split_default_route_and_fp32_out():
    """A long-K problem with few 128x128 tiles splits K in clusters of two by default (one
    launch, no workspace); with an fp32 output it takes the unsplit or workspace route."""
    import cute_kernels.ops.gemm as gemm_ops

    x, w = rand(768, 8192), rand(1024, 8192)
    assert gemm_ops.schedule(x, w).cluster_k == 2
    for out_dtype in (torch.bfloat16, torch.float32):
        gemm_ops._PLANS.clear()
        out = torch.full((768, 1024), POISON, dtype=out_dtype, device="cuda")
        ck.linear(x, w, out=out)
        check(out, x.float() @ w.float().t(), (x @ w.t()).float(), f"out {out_dtype}")
        (plan,) = gemm_ops._PLANS.values()
        assert plan.workspace == 0  # one kernel either way (fp32: 64x128 tiles, unsplit)


@HOPPER_ONLY
@pytest.mark.parametrize("tile, cluster_k, ctas, m, n, k, a_major, b_major, epilogue", [
    ((128, 128, 64), 2, None, 1000, 520, 4096, "m", "n", None),
    ((128, 128, 64), 2, None, 333, 776, 1000, "k", "n", "gelu"),  # 16 k-tiles, residues
    ((128, 64, 64), 2, None, 1024, 1024, 136, "k", "k", "silu"),  # 3 k-tiles: 1 + 2
    ((64, 128, 64), 2, None, 48, 1000, 264, "k", "n", "gelu_tanh"),  # 5 k-tiles: 2 + 3
    ((128, 128, 64), 2, 4, 700, 896, 2048, "k", "n", "relu"),  # 2 clusters walk 42 tiles
    ((128, 64, 64), 2, 2, 129, 200, 512, "k", "k", None),  # 1 cluster, 8 tiles
    ((128, 128, 64), 4, None, 333, 776, 1024, "k", "n", "gelu")])  # 4 slices of 4 k-tiles
def test_cluster_split_k(forced_schedule, tile, cluster_k, ctas, m, n, k, a_major, b_major,
                         epilogue):
    """Split-K in a cluster (the K slices summed through DSMEM in the launch) on residue
    shapes, slices of unequal k-tile counts, and few clusters walking many tiles (the
    receive buffer handed back between tiles); fp32 out takes the workspace route."""
    import cute_kernels.ops.gemm as gemm_ops

    forced_schedule(swap=False, splits=1, tile=tile, cluster_k=cluster_k, ctas=ctas)
    for _ in range(2):  # fresh inputs, the same compiled plan
        run_gemm("hopper", m, n, k, a_major=a_major, b_major=b_major, bias=True,
                 epilogue=epilogue)
    assert {(p.workspace == 0, p.ctas) for p in gemm_ops._PLANS.values()} == {
        (True, ctas or torch.cuda.get_device_properties(0).multi_processor_count
         // cluster_k * cluster_k)}
    run_gemm("hopper", m, n, k, a_major=a_major, b_major=b_major, dtype=torch.float16,
             out_dtype=torch.float32)


@HOPPER_ONLY
@pytest.mark.parametrize("tile, cluster_m, cluster_n, ctas, m, n, k, batch, a_major, b_major, "
                         "epilogue", [
    ((128, 64, 64), 1, 2, None, 1000, 520, 1000, None, "k", "n", "gelu"),  # a CTA past N
    ((64, 128, 64), 2, 2, None, 136, 776, 264, None, "m", "k", None),  # past M and past N
    ((128, 128, 64), 2, 2, 4, 700, 896, 2048, None, "k", "n", "relu"),  # 1 cluster, 24 tiles
    ((128, 64, 64), 1, 2, 2, 129, 200, 136, 3, "k", "k", "silu"),  # batched, 1 cluster
])
def test_clusters_along_n(forced_schedule, tile, cluster_m, cluster_n, ctas, m, n, k, batch,
                          a_major, b_major, epilogue):
    """Clusters along N (A tiles multicast) and 2x2 clusters (both operands multicast) on
    residue shapes whose last cluster has CTAs past M or N, and few clusters walking many
    tiles (every stage released in the peers of its row and column)."""
    import cute_kernels.ops.gemm as gemm_ops

    forced_schedule(swap=False, splits=1, tile=tile, cluster_m=cluster_m, cluster_n=cluster_n,
                    ctas=ctas, batched=batch is not None)
    for _ in range(2):  # fresh inputs, the same compiled plan
        run_gemm("hopper", m, n, k, batch=batch, a_major=a_major, b_major=b_major, bias=True,
                 epilogue=epilogue)
    size = cluster_m * cluster_n  # the plan took the forced clusters' grid
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert {p.ctas for p in gemm_ops._PLANS.values()} == {ctas or sms // size * size}
    run_gemm("hopper", m, n, k, batch=batch, a_major=a_major, b_major=b_major,
             dtype=torch.float16, out_dtype=torch.float32)


@HOPPER_ONLY
@pytest.mark.parametrize("tile, cluster_m, ctas, m, n, k, batch, a_major, b_major, epilogue, "
                         "shared", [
    # 20 cluster tiles on 6 clusters: 8 shared by k-ranges of 21-22 of their 16 k-tiles
    # (K 1000: the last k-tile partial), 12 whole
    ((128, 256, 64), 2, 12, 1000, 1104, 1000, None, "k", "n", None, 8),
    ((128, 192, 64), 2, 10, 336, 1000, 1000, None, "m", "k", "gelu", 7),  # CTAs past M
    ((128, 128, 64), 1, 7, 300, 520, 2048, 3, "k", "n", "silu", 10),  # batched, unclustered
    ((64, 128, 64), 2, 6, 200, 520, 136, None, "k", "k", "relu", 4),  # 3 k-tiles: ranges of 4
    ((192, 160, 64), 2, 8, 800, 1000, 1000, None, "k", "n", None, 5),  # three consumers
    ((128, 256, 64), 2, 8, 1000, 1104, 1000, None, "k", "n", None, 0),  # whole waves
    # fewer tiles than clusters: every tile shared, ranges shorter than a tile (2-3 clusters
    # per tile, the middle ones passing the sum on)
    ((64, 128, 64), 2, 42, 200, 520, 1000, None, "k", "n", None, 10),
    ((128, 64, 64), 2, 80, 336, 1024, 4096, None, "m", "n", "gelu", 32),
    ((128, 128, 64), 1, 64, 128, 256, 64, None, "k", "k", None, 0),  # 2 k-tiles, 64 clusters
])
def test_stream_k(forced_schedule, tile, cluster_m, ctas, m, n, k, batch, a_major, b_major,
                  epilogue, shared):
    """Stream-K (the last wave plus one, or every tile, shared out by k-ranges; partials
    passed on through the workspace) on residue shapes: K not a multiple of the k-tile, CTAs
    past M with an M-major A, batched, ranges shorter than two tiles and than one, 64- and
    192-row tiles, bf16 and fp32 out; and launches whose waves are whole or with fewer
    k-tiles than clusters (every tile whole, the same build)."""
    import cute_kernels.ops.gemm as gemm_ops
    from cute_kernels.kernels.common.tile_scheduler import cluster_tiles, stream_k_tiles

    if torch.cuda.get_device_properties(0).multi_processor_count < ctas:
        pytest.skip(f"needs {ctas} SMs for its persistent grid")
    forced_schedule(swap=False, splits=1, tile=tile, cluster_m=cluster_m, ctas=ctas,
                    batched=batch is not None, stream_k=True)
    for _ in range(2):  # fresh inputs, the same compiled plan and a fresh workspace
        run_gemm("hopper", m, n, k, batch=batch, a_major=a_major, b_major=b_major, bias=True,
                 epilogue=epilogue)
    run_gemm("hopper", m, n, k, batch=batch, a_major=a_major, b_major=b_major,
             dtype=torch.float16, out_dtype=torch.float32)
    plans = list(gemm_ops._PLANS.values())
    assert plans and all(p.stream_k is not None and p.ctas == ctas for p in plans)
    units = cluster_tiles(m, n, batch or 1, tile, cluster_m)
    assert stream_k_tiles(units, ctas // cluster_m, -(-k // tile[2])) == shared


@HOPPER_ONLY
@pytest.mark.parametrize("rows, k1, n1, n2, k3, cluster_k", [
    (768, 8192, 2048, 1024, 2048, 2),  # cluster splits
    (1024, 1024, 1024, 2048, 1024, 1),  # short one-wave launches in 2x1 clusters
])
def test_dependent_launches_wait_for_the_kernel_before(rows, k1, n1, n2, k3, cluster_k):
    """Cluster-split GEMMs and short one-wave ones launch as programmatic dependents. A chain
    of three: the first writes a (rows x n1); the second (rows x n2 x n1) reads a; the third
    (rows x n1 x k3) overwrites a. Captured in a CUDA graph, replayed on new inputs, and run
    eagerly: the second saw all of the first's a and none of the third's, so each launch
    waited for the writes and the reads of the kernel before."""
    import cute_kernels.ops.gemm as gemm_ops

    x, z = rand(rows, k1), rand(rows, k3)
    w1, w2, w3 = rand(n1, k1), rand(n2, n1), rand(n1, k3)
    a = torch.empty(rows, n1, dtype=torch.bfloat16, device="cuda")
    b = torch.empty(rows, n2, dtype=torch.bfloat16, device="cuda")
    for lhs, rhs in ((x, w1), (a, w2), (z, w3)):
        sched = gemm_ops.schedule(lhs, rhs)
        assert sched.pdl and sched.cluster_k == cluster_k, sched

    def chain():
        ck.linear(x, w1, out=a)
        ck.linear(a, w2, out=b)  # reads a
        ck.linear(z, w3, out=a)  # then overwrites it

    chain()  # compile and plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    for replay in (True, True, False):
        x.copy_(rand(rows, k1))
        z.copy_(rand(rows, k3))
        a.fill_(POISON), b.fill_(POISON)
        graph.replay() if replay else chain()
        torch.cuda.synchronize()
        first = (x.float() @ w1.float().t()).bfloat16().float()
        assert rel_err(b, first @ w2.float().t()) < 1e-2
        assert rel_err(a, z.float() @ w3.float().t()) < 1e-2


@HOPPER_ONLY
@pytest.mark.parametrize("tile, ctas, m, n, k, b_major, epilogue", [
    ((64, 16, 128), 64, 7, 1000, 4104, "k", "gelu"),  # 16 tiles, 4 CTAs each; K residue
    ((64, 32, 128), 40, 29, 392, 4096, "n", None),  # 7 tiles on 40 CTAs, 32-column tile
    ((64, 16, 128), 20, 13, 1000, 2048, "k", "silu"),  # whole tiles and shared ones
    ((128, 16, 128), 24, 1, 520, 136, "n", None),  # fewer k-tiles than CTAs
])
def test_swap_ab_stream_k(forced_schedule, tile, ctas, m, n, k, b_major, epilogue):
    """Swap-AB with stream-K: the CTAs share the swapped tiles' k-ranges, leave their
    partials in the workspace for each tile's last CTA, which adds them and stores C^T into
    ``out`` (one launch, no reduce): up to 4 CTAs a tile, residue K, M and N, both weight
    majors, bias and activations, fp32 out."""
    import cute_kernels.ops.gemm as gemm_ops

    if torch.cuda.get_device_properties(0).multi_processor_count < ctas:
        pytest.skip(f"needs {ctas} SMs for its persistent grid")
    forced_schedule(swap=True, splits=1, tile=tile, ctas=ctas, stream_k=True)
    for _ in range(2):  # fresh inputs, the same compiled plan and a fresh workspace
        run_gemm("hopper", m, n, k, b_major=b_major, bias=True, epilogue=epilogue)
    run_gemm("hopper", m, n, k, b_major=b_major, dtype=torch.float16,
             out_dtype=torch.float32)
    plans = list(gemm_ops._PLANS.values())
    assert plans and all(p.swap and p.workspace == 0 and p.stream_k is not None
                         and p.ctas == ctas for p in plans), plans


@HOPPER_ONLY
def test_stream_k_default_route_in_a_cuda_graph():
    """The default schedule takes stream-K where the last wave would idle (4000 x 11008 x
    4096 on 128 x 256 tiles: 688 cluster tiles on 66 clusters); captured in a CUDA graph
    (the flags' zeroing and the workspace are captured with it), replayed on new inputs."""
    import cute_kernels.ops.gemm as gemm_ops

    m, n, k = 4000, 11008, 4096
    x, w, bias = rand(m, k), rand(n, k), rand(n)
    plan = gemm_ops.schedule(x, w)
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:  # H100 / H200 SXM
        assert plan.stream_k
    out = torch.full((m, n), POISON, dtype=torch.bfloat16, device="cuda")
    ck.linear(x, w, bias, out=out)  # compile and plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ck.linear(x, w, bias, out=out)
    for _ in range(2):
        x.copy_(rand(m, k))
        out.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        ref = x.float() @ w.float().t() + bias.float()
        check(out, ref, (x @ w.t() + bias).float(), "stream-K default route, graph replay")


@HOPPER_ONLY
@pytest.mark.parametrize("splits", [1, 2], ids=["swap-direct", "swap-split-2"])
def test_skinny_schedule_into_strided_out(forced_schedule, splits):
    """``out`` with padded rows (8-element multiples) gets only its (M, N) window written;
    rows of other strides are refused before launch (fp32 rows of 4-element multiples are
    16-byte aligned but not whole 32-byte sectors of the kernels' 8-element row rule).
    Unsplit, the swapped kernel stores C^T into ``out`` itself (no workspace, no reduce)."""
    import cute_kernels.ops.gemm as gemm_ops

    forced_schedule(swap=True, splits=splits)
    x, w = rand(13, 512), rand(264, 512)
    ref = x.float() @ w.float().t()
    for dtype in (torch.bfloat16, torch.float32):
        big = torch.full((13, 272), POISON, dtype=dtype, device="cuda")
        ck.gemm(x, w.t(), out=big[:, :264])
        check(big[:, :264], ref, (x @ w.t()).float(), f"{dtype} out row stride 272")
        assert torch.isnan(big[:, 264:]).all(), "wrote outside out's window"
        routes = {(plan.swap, plan.workspace == 0, plan.flat)
                  for plan in gemm_ops._PLANS.values()}
        # unsplit: the plain 2-D operands and out, seen transposed by the kernel
        assert routes == {(True, splits == 1, splits == 1)}, routes
    for dtype, cols in ((torch.bfloat16, 267), (torch.float32, 268)):
        big = torch.empty((13, cols), dtype=dtype, device="cuda")
        with pytest.raises(ValueError, match="stride"):
            ck.gemm(x, w.t(), out=big[:, :264])
