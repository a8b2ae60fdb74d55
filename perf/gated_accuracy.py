"""Accuracy of the fused gated up-projection (the accuracy table of "Towards Fused Kernels for
Gated MLP", docs/gated_mlp.md, References): max abs, mean abs and relative error against an
fp32 reference, next to torch's own bf16 unfused path.

    python perf/gated_accuracy.py [--path hopper|ampere] [--out perf/results]

M = K = I = size for size in 1024..16384, x ~ N(0, 1), Kaiming-normal weights, SwiGLU.
"""

from __future__ import annotations

import argparse
import os

import torch

import cute_kernels as ck
from cute_kernels.bench import device_name, format_table, save_results
from cute_kernels.ops.activations import gate
from cute_kernels.ops.gated_mlp import gated_mlp_up_reference


def errors(out, ref):
    d = (out.float() - ref).abs()
    return d.max().item(), d.mean().item(), (d.norm() / ref.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--path", choices=["hopper", "ampere"], default=None)
    ap.add_argument("--out", default="perf/results")
    args = ap.parse_args()
    torch.manual_seed(0)
    table = []
    for size in (1024, 2048, 4096, 8192, 16384):
        x = torch.randn(size, size, device="cuda").bfloat16()
        w = ck.pack_gated_weight(
            *(torch.randn(size, size, device="cuda").mul_((2 / size) ** 0.5).bfloat16()
              for _ in range(2)))
        ref = gated_mlp_up_reference(x, w, "swiglu")
        with ck.force_path(args.path):
            ours = ck.gated_mlp_up(x, w)
        pre = x @ w.t()
        torch_bf16 = gate(pre[:, 0::2].float(), pre[:, 1::2].float(), "swiglu").bfloat16()
        table.append([size, *(f"{e:.2e}" for e in (*errors(ours, ref), *errors(torch_bf16, ref)))])
        del x, w, ref, ours, pre, torch_bf16
        torch.cuda.empty_cache()
    print(f"{device_name()} | path {args.path or 'native'} | commit "
          f"{os.environ.get('CK_COMMIT', 'unknown')}\n")
    print(format_table(["MNK", "max abs", "mean abs", "rel", "torch max abs", "torch mean abs",
                        "torch rel"], table))
    save_results(args.out, f"gated_accuracy_{args.path or 'native'}",
                 {"device": device_name(), "rows": table})


if __name__ == "__main__":
    main()
