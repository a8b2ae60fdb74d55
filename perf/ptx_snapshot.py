"""PTX fingerprints of every build a refactor must not change (no GPU needed).

Compiles each registered kernel variant for both paths plus the Hopper attention and GEMM
configurations the GPU tests cover, strips debug locations (``.loc``/``.file``, which move
with the source), and writes ``{build: sha256}`` as JSON. Compare two snapshots to prove a
restructuring left the device code byte-identical:

    python perf/ptx_snapshot.py --out before.json       # on the old commit
    python perf/ptx_snapshot.py --out after.json --compare before.json

``--jobs`` compiles in that many processes (each build is independent).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

ATTENTION_CONFIGS = [dict(), dict(overlap=True), dict(block_m=192), dict(block_m=192, block_n=64),
                     dict(block_n=176, overlap=True), dict(pingpong=True),
                     dict(block_m=192, pingpong=True), dict(overlap=True, persistent=True),
                     dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2,
                          persistent=True)]
COLSUM_CONFIGS = [dict(), dict(pingpong=True), dict(block_m=192, block_n=64),
                  dict(block_m=192, pingpong=True), dict(block_m=192, colsum_method="shuffle"),
                  dict(overlap=True), dict(overlap=True, colsum_method="shuffle"),
                  dict(block_m=192, colsum_method="mma_sync"),
                  dict(colsum_method="mma_sync", pingpong=True),
                  dict(overlap=True, colsum_method="mma_sync"),
                  dict(overlap=True, colsum_stages=8, colsum_writers=2)]


def build_names() -> list[str]:
    from cute_kernels.registry import entries

    names = [f"registry:{e.name}:{v}:{t}" for e in entries().values() for v in e.variants
             for t in ("sm_80", "sm_90a")]
    for d in (64, 128):
        for causal in (False, True):
            names += [f"attn:{d}:{int(causal)}:{json.dumps(c, sort_keys=True)}"
                      for c in ATTENTION_CONFIGS]
        for group in (128, 192):
            for c in COLSUM_CONFIGS:
                if c.get("colsum_method") == "shuffle" and c.get("block_m", 128) != group:
                    continue
                if d == 128 and c.get("block_m") == 192:
                    continue  # over the smem budget: refused at construction
                names.append(f"colsum:{d}:{group}:{json.dumps(c, sort_keys=True)}")
    names += ["gemm:drift", "gemm:bias-gelu", "gemm:fp32-out", "gemm:flat", "gemm:flat-swap",
              "gated:bias-swiglu", "attn-ampere-colsum:64:128", "gather:short-persistent",
              "gemm:cluster-split", "gemm:cluster-2x2", "gemm:split-swap", "attn:split-decode",
              "attn:combine-pdl"]
    return names


def _build(name: str):
    import torch

    from cute_kernels.kernels.gemm.epilogue import Epilogue
    from cute_kernels.ops import attention, gated_mlp, gemm
    from cute_kernels.registry import get_entry
    from cute_kernels.runtime.arch import PATH_OF_TARGET

    kind, _, rest = name.partition(":")
    if kind == "registry":
        op, variant, target = rest.split(":")
        return get_entry(op).build(variant, PATH_OF_TARGET[target]), target
    if name == "attn:split-decode":  # split-KV decode's 64-row tile and its PDL combine
        return attention.make_build("hopper", torch.bfloat16, 128, False, split_kv=True,
                                    short_query=True, combine_pdl=True), "sm_90a"
    if name == "attn:combine-pdl":
        return attention.make_combine_build(torch.bfloat16, 128, pdl=True), "sm_90a"
    if kind == "attn":
        d, causal, cfg = rest.split(":", 2)
        return attention.make_build("hopper", torch.bfloat16, int(d), bool(int(causal)),
                                    config=json.loads(cfg)), "sm_90a"
    if kind == "colsum":
        d, group, cfg = rest.split(":", 2)
        cfg = dict(json.loads(cfg), colsum=True, group=int(group))
        return attention.make_build("hopper", torch.bfloat16, int(d), False, colsum=True,
                                    group=int(group), config=cfg), "sm_90a"
    if kind == "attn-ampere-colsum":
        d, group = rest.split(":")
        return attention.make_build("ampere", torch.bfloat16, int(d), False, colsum=True,
                                    group=int(group)), "sm_80"
    bf16 = torch.bfloat16
    if name == "gemm:drift":
        return gemm.make_build("hopper", bf16, bf16, "k", "k", Epilogue(), drift=True), "sm_90a"
    if name == "gemm:bias-gelu":
        return gemm.make_build("hopper", bf16, bf16, "k", "n", Epilogue(bias=True,
                                                                        activation="gelu"),
                               bias_dtype=bf16), "sm_90a"
    if name == "gemm:fp32-out":
        return gemm.make_build("hopper", bf16, torch.float32, "k", "k", Epilogue()), "sm_90a"
    if name == "gemm:flat":  # 2-D operands (the op's plain Hopper plans)
        return gemm.make_build("hopper", bf16, bf16, "k", "k", Epilogue(),
                               batched=False), "sm_90a"
    if name == "gemm:flat-swap":  # a swap-AB launch storing C^T into the 2-D out
        return gemm.make_build("hopper", bf16, bf16, "k", "k", Epilogue(bias_dim=0), None, 1,
                               (128, 16, 128), False, 6, batched=False,
                               c_transposed=True), "sm_90a"
    if name == "gemm:cluster-split":  # split-K 2 in a cluster, summed through DSMEM
        return gemm.make_build("hopper", bf16, bf16, "k", "k", Epilogue(), None, 1,
                               (128, 64, 64), False, 8, batched=False, cluster_k=2), "sm_90a"
    if name == "gemm:split-swap":  # swap-AB split-K 2 through the workspace, with its reduce
        return gemm.split_build("hopper", bf16, bf16, "k", "k", True, Epilogue(bias=True),
                                bf16, 1, (64, 16, 128), 8), "sm_90a"
    if name == "gemm:cluster-2x2":  # both operands multicast
        return gemm.make_build("hopper", bf16, bf16, "k", "k", Epilogue(), None, 2,
                               (128, 128, 64), batched=False, cluster_n=2), "sm_90a"
    if name == "gather:short-persistent":
        from cute_kernels.ops import column_sparse

        return column_sparse.make_build("hopper", bf16, 128, 128, False, short=True,
                                        persistent=True), "sm_90a"
    if name == "gated:bias-swiglu":
        return gated_mlp.make_build("hopper", bf16, bf16, "k", "k", "swiglu",
                                    bias_dtype=bf16), "sm_90a"
    raise ValueError(name)


def normalise(ptx: str) -> str:
    """PTX without debug locations, the compiler's comments and the kernels' mangled names
    (they spell the defining module and the argument types, which a file move changes)."""
    lines = [ln for ln in ptx.splitlines()
             if not re.match(r"\s*(\.loc|\.file|//)", ln)]
    text = "\n".join(lines)
    for i, name in enumerate(re.findall(r"\.entry\s+(\w+)\(", text)):
        text = text.replace(name, f"kernel{i}")
    return text


def fingerprint(name: str) -> tuple[str, str]:
    from cute_kernels.runtime.compile import compile_ptx

    try:
        build, target = _build(name)
        ptx = normalise(compile_ptx(build, target))
    except Exception as err:  # a build that fails is recorded, not fatal
        return name, f"error: {type(err).__name__}: {err}"[:300]
    dump = os.environ.get("PTX_SNAPSHOT_DUMP")
    if dump:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        with open(os.path.join(dump, safe + ".ptx"), "w") as f:
            f.write(ptx)
    return name, hashlib.sha256(ptx.encode()).hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", help="an earlier snapshot: report builds that differ")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="regex: fingerprint matching builds only")
    args = parser.parse_args(argv)
    names = build_names()
    if args.only:
        names = [n for n in names if re.search(args.only, n)]
    with ProcessPoolExecutor(args.jobs) as pool:
        result = dict(pool.map(fingerprint, names))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    errors = [n for n, h in result.items() if h.startswith("error")]
    for n in errors:
        print(f"ERROR {n}: {result[n]}")
    if not args.compare:
        print(f"{len(result)} builds, {len(errors)} errors -> {args.out}")
        return 1 if errors else 0
    with open(args.compare) as f:
        before = json.load(f)
    changed = [n for n in result if n in before and before[n] != result[n]]
    missing = [n for n in before if n not in result]
    for n in changed:
        print(f"CHANGED {n}")
    for n in missing:
        print(f"MISSING {n}")
    same = len(result) - len(changed) - len(errors)
    print(f"{same} identical, {len(changed)} changed, {len(missing)} missing, "
          f"{len(errors)} errors")
    return 1 if changed or errors or missing else 0


if __name__ == "__main__":
    sys.exit(main())
