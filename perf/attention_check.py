"""Attention accuracy table for quick diagnosis on the GPU (no asserts): per path and shape,
relative error of o against the fp32 reference next to torch's bf16 SDPA, max lse error, and
whether unwritten (NaN-poisoned) outputs remain.

    python perf/attention_check.py [--path hopper|ampere]
"""

from __future__ import annotations

import argparse

import torch

import cute_kernels as ck
from cute_kernels.bench import format_table
from cute_kernels.ops.attention import attention_reference, torch_attention

SHAPES = [  # (S_q, S_kv, H, H_kv, D, causal)
    (128, 128, 2, 2, 64, False), (1, 1, 2, 2, 128, False), (17, 17, 4, 2, 64, True),
    (1000, 1000, 2, 1, 128, False), (1000, 1000, 2, 1, 128, True), (128, 4097, 2, 2, 64, True),
    (300, 77, 2, 2, 128, True), (4096, 4096, 4, 4, 128, True),
]


def rel(x, ref):
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    args = ap.parse_args()
    rows = []
    for s_q, s_kv, h, h_kv, d, causal in SHAPES:
        q = torch.randn(2, s_q, h, d, device="cuda").bfloat16().transpose(1, 2)
        k = torch.randn(2, h_kv, s_kv, d, device="cuda").bfloat16()
        v = torch.randn(2, h_kv, s_kv, d, device="cuda").bfloat16()
        out = torch.full((2, h, s_q, d), float("nan"), device="cuda").bfloat16()
        try:
            with ck.force_path(args.path):
                o, lse = ck.attention(q, k, v, causal=causal, return_lse=True, out=out)
            torch.cuda.synchronize()
        except Exception as err:  # report and go on: this script is for diagnosis
            rows.append([f"{s_q}x{s_kv} h{h}/{h_kv} d{d} c{int(causal)}", "ERROR",
                         str(err).splitlines()[0][:60], "", ""])
            continue
        ref_o, ref_lse = attention_reference(q, k, v, causal=causal)
        torch_o = torch_attention(q, k, v, causal=causal)
        finite = torch.isfinite(ref_lse)
        lse_err = (lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
        rows.append([f"{s_q}x{s_kv} h{h}/{h_kv} d{d} c{int(causal)}",
                     f"{rel(o.nan_to_num(1e4), ref_o):.2e}", f"{rel(torch_o, ref_o):.2e}",
                     f"{lse_err:.2e}", int(torch.isnan(o).sum().item())])
    print(f"path {args.path or 'native'}")
    print(format_table(["shape", "rel err o", "torch rel err", "max lse err", "NaN outs"], rows))


if __name__ == "__main__":
    main()
