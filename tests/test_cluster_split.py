"""The cluster split-K exchange's bookkeeping (no GPU): who owns which subtiles, where each
sender's partial lands in a receiver's buffer, and the configurations it refuses."""

import pytest

from cute_kernels.kernels.gemm.cluster_split import CHUNK, ClusterSplitK


@pytest.mark.parametrize("splits, threads, values, subtiles", [
    (2, 256, 64, 4),  # 128x128 tile, two consumer warpgroups, 128x32 subtiles
    (2, 256, 96, 6),  # 128x192
    (2, 256, 32, 2),  # 128x64
    (4, 128, 64, 4)])  # 64x128, one consumer warpgroup
def test_owners_slots_and_buffer(splits, threads, values, subtiles):
    split = ClusterSplitK(splits, threads, values, subtiles)
    owned = [list(split.owned_subtiles(r)) for r in range(splits)]
    assert sorted(s for run in owned for s in run) == list(range(subtiles))  # a partition
    assert all(len(run) == subtiles // splits for run in owned)
    for receiver in range(splits):  # each peer its own slot, in rank order
        slots = [split.slot(s, receiver) for s in range(splits) if s != receiver]
        assert slots == list(range(splits - 1))
    # one share (values / splits per thread) from each peer, in whole 16-byte chunks
    assert split.share * splits == values and split.share % CHUNK == 0
    assert split.buffer_elems() == (splits - 1) * threads * values // splits


@pytest.mark.parametrize("splits, values, subtiles", [(3, 64, 4), (8, 64, 8), (2, 64, 3),
                                                      (4, 8, 4)])
def test_refuses_uneven_or_unsupported_splits(splits, values, subtiles):
    with pytest.raises(ValueError, match="cluster split-K"):
        ClusterSplitK(splits, 256, values, subtiles)


def test_gemm_kernel_refuses_cluster_split_with_multicast_or_gating():
    from cute_kernels.kernels.gemm.sm90 import GemmSm90

    for kwargs in (dict(cluster_m=2), dict(cluster_m=1, gated="swiglu"),
                   dict(cluster_m=1, c_transposed=True)):
        with pytest.raises(ValueError, match="cluster_k 2"):
            GemmSm90(cluster_k=2, **kwargs)
    GemmSm90(cluster_k=2, cluster_m=1, tile=(128, 128, 64))  # the supported form


def test_gemm_kernel_refuses_oversized_or_split_2d_clusters():
    from cute_kernels.kernels.gemm.sm90 import GemmSm90

    with pytest.raises(ValueError, match="1 to 8 CTAs"):
        GemmSm90(cluster_m=4, cluster_n=4)
    with pytest.raises(ValueError, match="cluster_n 2"):
        GemmSm90(cluster_k=2, cluster_m=1, cluster_n=2)
    GemmSm90(cluster_m=2, cluster_n=2, tile=(128, 128, 64))  # a 2x2 cluster
