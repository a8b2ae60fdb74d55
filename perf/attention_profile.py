"""Run one Hopper attention configuration under an NVTX range ``profile`` (for ncu):

    ncu --nvtx --nvtx-include profile/ ... python perf/attention_profile.py B,H,S,D "dict(...)"

The config is AttentionSm90's keyword arguments plus ``causal=True`` (the causal kernel);
colsum=True runs the column-sum variant with prev_lse = the plain kernel's lse. The config
``dict(sdpa="cudnn")`` (or "flash") profiles that SDPA backend instead, for a side-by-side;
``dict(op=True, causal=True)`` profiles ``cute_kernels.attention`` itself (the op's default
route, persistent schedules and their tile order included).
"""

from __future__ import annotations

import math
import sys

import torch
from gemm_tuning import parse_configs  # perf/ is the script's directory

from cute_kernels.kernels.attention.sm90 import AttentionSm90
from cute_kernels.ops.attention import make_build
from cute_kernels.runtime.compile import Build, compile_build


def main() -> None:
    b, h, s, d = (int(v) for v in sys.argv[1].split(","))
    cfg = parse_configs(f"[{sys.argv[2]}]")[0]
    causal = bool(cfg.pop("causal", False))
    q, k, v = (torch.randn(b, h, s, d, device="cuda").bfloat16() for _ in range(3))
    backend = cfg.pop("sdpa", None)
    if backend is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
        with sdpa_kernel(which[backend]):
            for _ in range(2):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("profile")
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        print("ok")
        return
    if cfg.pop("op", False):
        import cute_kernels as ck

        for _ in range(2):
            ck.attention(q, k, v, causal=causal)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("profile")
        ck.attention(q, k, v, causal=causal)
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        print("ok")
        return
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda")
    scale = 1.0 / math.sqrt(d)
    plain = compile_build(Build(AttentionSm90(d, False),
                                make_build("hopper", torch.bfloat16, d, False).args), "sm_90a")
    plain(q, k, v, o, lse, None, None, None, None, scale, None)
    extra = (None, None)
    kern = AttentionSm90(d, causal, **cfg)
    if cfg.get("colsum"):
        extra = (lse.clone(), torch.zeros(b, h, -(-s // kern.group), s, device="cuda"))
    fake = make_build("hopper", torch.bfloat16, d, causal, colsum=bool(cfg.get("colsum"))).args
    fn = compile_build(Build(kern, fake), "sm_90a")
    for _ in range(2):
        fn(q, k, v, o, lse, *extra, None, None, scale, None)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profile")
    fn(q, k, v, o, lse, *extra, None, None, scale, None)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("ok")


if __name__ == "__main__":
    main()
