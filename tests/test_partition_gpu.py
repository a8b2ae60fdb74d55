"""SmPartition (issue 16) on the GPU: green contexts really keep each stream's kernels on its
own SMs (a kernel that records ``%smid`` per CTA), our ops give the same results inside a
partition as outside (the GEMM's persistent grid sized to the main SMs, ``scatter_add`` on the
side ones), in both modes and inside a CUDA graph."""

import pytest
import torch
from gpu_paths import gen  # tests/ is on pytest's path

import cute_kernels as ck
from cute_kernels.partition import SmPartition, green_contexts_available
from cute_kernels.runtime.arch import confining_grid, device_sm_count, sm_count

pytestmark = pytest.mark.gpu
MODES = ("green", "streams")


def partition(mode: str, side_sms: int = 8) -> SmPartition:
    if mode == "green" and not green_contexts_available():
        pytest.skip("green contexts are not available here (driver < 12.4 or cuda-python "
                    "without them): SmPartition falls back to streams")
    return SmPartition(side_sms, mode=mode)


def smid_kernel():
    """A triton kernel whose CTA i spins ~20 µs, then writes the SM it ran on to out[i]."""
    triton = pytest.importorskip("triton", reason="the %smid probe kernel is written in triton")
    import triton.language as tl

    @triton.jit
    def record_smid(out_ptr, spin: tl.constexpr):
        pid = tl.program_id(0)
        acc = pid
        for _ in range(spin):  # keeps the CTA resident, so the grid spreads over the SMs
            acc = (acc * 1103515245 + 12345) & 0x7FFFFFFF
        smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [acc], dtype=tl.int32,
                                         is_pure=False, pack=1)
        tl.store(out_ptr + pid, smid)

    def run(ctas: int = 2048) -> torch.Tensor:
        out = torch.full((ctas,), -1, dtype=torch.int32, device="cuda")
        record_smid[(ctas,)](out, spin=20000)
        return out

    return run


def test_green_contexts_confine_every_kernel():
    part = partition("green")
    run = smid_kernel()
    everywhere = run()
    with part:
        with part.main():
            main = run()
        with part.side():
            side = run()
    torch.cuda.synchronize()
    for ids in (everywhere, main, side):
        assert int(ids.min()) >= 0, "a CTA did not write its SM"
    total = device_sm_count(part.device)
    assert len(set(everywhere.tolist())) > part.side_sms, "the probe does not spread"
    side_sms, main_sms = set(side.tolist()), set(main.tolist())
    assert len(side_sms) <= part.side_sms < total
    assert len(main_sms) <= part.main_sms
    assert not side_sms & main_sms, "the two green contexts shared an SM"
    assert part.side_sms + part.main_sms <= total


def problem(g, rows: int, k: int, n: int, m: int, f: int, counts: list[int]):
    """A GEMM (x (rows, k), w (n, k)) and a writeback (src (m, L), an M-major dest (m, f),
    distinct random lists per group of 128 rows, ``counts``) on fresh random inputs."""
    x = torch.randn(rows, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16() / 16
    width = max(counts)
    src = torch.randn(m, width, device="cuda", generator=g).bfloat16()
    dest = torch.randn(f, m, device="cuda", generator=g).bfloat16().t()
    indices = torch.stack([torch.randperm(f, device="cuda", generator=g)[:width]
                           for _ in range(len(counts))]).int()
    return x, w, src, dest, indices, torch.tensor(counts, dtype=torch.int32, device="cuda")


@pytest.mark.parametrize("mode", MODES)
def test_ops_in_a_partition_match_references(mode):
    part = partition(mode)
    x, w, src, dest, indices, counts = problem(gen(), 1000, 512, 768, 640, 1024,
                                               [100, 0, 37, 99, 64])
    want_dest = ck.reference.scatter_add(src, dest, indices, counts)
    out = torch.full((1000, 768), float("nan"), dtype=torch.bfloat16, device="cuda")
    with part:
        with part.main():
            assert sm_count(part.device) == part.main_sms
            ck.linear(x, w, out=out)
        with part.side():
            assert sm_count(part.device) == part.side_sms
            assert confining_grid(part.device) == (None if mode == "green" else part.side_sms)
            ck.scatter_add(src, dest, indices, counts)
    assert sm_count(part.device) == device_sm_count(part.device)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), x.float() @ w.float().t(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(dest.float(), want_dest.float(), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("mode", MODES)
def test_partition_in_a_cuda_graph(mode):
    part = partition(mode)
    g = gen()
    x, w, src, dest, indices, counts = problem(g, 512, 256, 384, 256, 512, [64, 17])
    out = torch.empty(512, 384, dtype=torch.bfloat16, device="cuda")

    def step():
        part.run(lambda: ck.linear(x, w, out=out),
                 lambda: ck.scatter_add(src, dest, indices, counts))

    step()  # compiles and plans outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):  # fresh inputs through the captured pointers
        x.copy_(torch.randn(512, 256, device="cuda", generator=g))
        src.copy_(torch.randn(src.shape, device="cuda", generator=g))
        out.fill_(float("nan"))
        before = dest.clone()
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), x.float() @ w.float().t(), atol=2e-2,
                                   rtol=2e-2)
        torch.testing.assert_close(dest.float(), ck.reference.scatter_add(
            src, before, indices, counts).float(), atol=2e-2, rtol=1e-2)
