"""First-call time and steady-state host overhead of every public op.

    python perf/first_call.py [--out perf/results] [--ops attention,linear] [--rounds 50]

For each op, two fresh processes share a new, empty disk cache (CUTE_KERNELS_CACHE_DIR): the
first compiles ("empty cache"; these run side by side for all ops), the second loads the
exported kernel ("warm cache"; one at a time). Each
reports the wall time of its first call (inputs made and the CUDA context up beforehand; the
call and a synchronize timed), its second call, the time of ``import cute_kernels``, and
whether the first call imported what torch's custom-op dispatcher imports (Dynamo, sympy,
the Triton wrapper: issue 18's seconds).

Then, in this process, the steady-state host cost per call: rounds of 100 back-to-back calls
on tiny inputs, host time only (the launch queue never fills, so no call waits for the GPU),
median over rounds; against the same compiled kernel(s) called directly through TVM-FFI with
the arguments the op passed (recorded from one call). "overhead" = op - raw: validation,
allocation, dispatch.

Prints a table, checks the goals (warm first call <= 0.3 s for every op; attention's
overhead within 10 µs of linear's) and writes first_call.json into --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MARK = "FIRST_CALL_JSON "
#: imported by torch's custom-op dispatcher on its first call, not by a direct launch
DISPATCHER_MODULES = ("sympy", "torch._dynamo", "torch._higher_order_ops.triton_kernel_wrap",
                      "torch.distributed.fsdp")
WARM_FIRST_CALL_GOAL_S = 0.3
ATTENTION_VS_LINEAR_GOAL_US = 10.0


def make_call(name: str):
    """(a no-argument call of op ``name`` on tiny fresh inputs)."""
    import torch

    import cute_kernels as ck

    def rand(*shape):
        return torch.randn(*shape, device="cuda").bfloat16()

    if name == "pack_mask":
        mask = torch.rand(1, 64, device="cuda") < 0.5
        return lambda: ck.pack_mask(mask)
    if name == "unpack_mask":
        packed = torch.randint(0, 256, (1, 8), dtype=torch.uint8, device="cuda")
        return lambda: ck.unpack_mask(packed, 64)
    if name == "gemm":
        a, b = rand(128, 64), rand(64, 256)
        return lambda: ck.gemm(a, b)
    if name == "linear":
        x, w = rand(128, 64), rand(256, 64)
        return lambda: ck.linear(x, w)
    if name == "gated_mlp_up":
        x, w = rand(128, 64), rand(256, 64)
        return lambda: ck.gated_mlp_up(x, w)
    if name == "attention":
        q, k, v = rand(1, 1, 128, 64), rand(1, 1, 128, 64), rand(1, 1, 128, 64)
        return lambda: ck.attention(q, k, v)
    if name == "attention_colsum":
        q, k, v = rand(1, 1, 128, 64), rand(1, 1, 128, 64), rand(1, 1, 128, 64)
        prev = torch.randn(1, 1, 128, device="cuda") + 5
        return lambda: ck.attention_colsum(q, k, v, prev, group=128)
    raise ValueError(f"unknown op {name!r}")


OPS = ("pack_mask", "unpack_mask", "gemm", "linear", "gated_mlp_up", "attention",
       "attention_colsum")


def child(name: str) -> None:
    """One fresh process: import, inputs, then the first and second call of ``name``."""
    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter()
    import cute_kernels  # noqa: F401
    from cute_kernels.runtime.compile import KERNELS

    t_import = time.perf_counter()
    call = make_call(name)
    torch.cuda.synchronize()
    before = set(sys.modules)
    profiler = None
    if os.environ.get("FIRST_CALL_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t = time.perf_counter()
    call()
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    imported = sorted(set(sys.modules) - before)
    t = time.perf_counter()
    call()
    torch.cuda.synchronize()
    second = time.perf_counter() - t
    print(MARK + json.dumps({
        "op": name, "import_torch_s": t_torch - t0, "import_ck_s": t_import - t_torch,
        "first_call_s": first, "second_call_s": second, "modules_imported": len(imported),
        "dispatcher_modules": [m for m in imported if m.startswith(DISPATCHER_MODULES)][:8],
        "dsl_imported": "cutlass" in sys.modules,
        "cache": dict(KERNELS.stats)}))


def _run_child(name: str, cache: str, label: str) -> dict:
    env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=cache, CUTE_KERNELS_DISK_CACHE="1")
    run = subprocess.run([sys.executable, __file__, "--child", name], env=env,
                         capture_output=True, text=True, timeout=900)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(MARK)]
    if run.returncode or not lines:
        raise RuntimeError(f"{name} ({label} cache) failed:\n{run.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK):])


def first_calls(names, root: str) -> dict:
    """Per op, its first call in a process with an empty disk cache of its own (under
    ``root``), then in one with that cache warm. The empty-cache processes run side by side
    (compiling is single-threaded host work, and the device machine has cores to spare); the
    warm ones run one at a time, so nothing competes with the timed load."""
    from concurrent.futures import ThreadPoolExecutor

    caches = {n: os.path.join(root, n) for n in names}
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        cold = dict(zip(names, pool.map(lambda n: _run_child(n, caches[n], "empty"), names)))
    out = {}
    for name in names:
        print(f"first calls: {name} ...", flush=True)
        out[name] = {"empty": cold[name], "warm": _run_child(name, caches[name], "warm")}
    return out


def merge_caches(root: str, into: str) -> None:
    """Every op's exported kernels in one folder (entries are content-addressed files), so
    the steady-state phase loads instead of compiling again."""
    import shutil

    os.makedirs(into, exist_ok=True)
    for sub in os.listdir(root):
        folder = os.path.join(root, sub)
        if os.path.abspath(folder) == os.path.abspath(into):
            continue
        for f in os.listdir(folder) if os.path.isdir(folder) else ():
            if f.endswith(".o"):
                shutil.copy2(os.path.join(folder, f), os.path.join(into, f))


def host_us(fn, *, calls: int = 100, rounds: int = 50) -> float:
    """Median host time per call over rounds of ``calls`` back-to-back calls (fewer than the
    launch queue holds, so the host never waits for the GPU); the queue drains between."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t) / calls)
        torch.cuda.synchronize()
    return statistics.median(samples) * 1e6


def raw_launches(call):
    """The compiled kernel(s) ``call`` launches and their exact arguments, as one callable:
    the bridge's resolved kernels are wrapped in recorders for one call (the GEMM and
    attention plan caches, which hold kernels too, are cleared around it)."""
    from cute_kernels.ops import attention as attention_ops
    from cute_kernels.ops import gemm as gemm_ops
    from cute_kernels.runtime import bridge

    call()
    seen = []

    class Recorder:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, *args):
            seen.append((self.fn, args))
            return self.fn(*args)

    saved = dict(bridge._RESOLVED)
    plan_caches = (gemm_ops._PLANS, attention_ops._PLANS)
    for plans in plan_caches:
        plans.clear()
    try:
        bridge._RESOLVED.update({k: Recorder(fn) for k, fn in saved.items()})
        call()
    finally:
        bridge._RESOLVED.update(saved)
        for plans in plan_caches:  # plans made during the recording hold the recorders
            plans.clear()
    if not seen:
        raise RuntimeError("no kernel launch was recorded")

    def raw():
        for fn, args in seen:
            fn(*args)

    return raw, len(seen)


def steady_state(names, rounds: int) -> dict:
    out = {}
    for name in names:
        call = make_call(name)
        raw, launches = raw_launches(call)
        op_us, raw_us = host_us(call, rounds=rounds), host_us(raw, rounds=rounds)
        out[name] = {"op_us": op_us, "raw_us": raw_us, "overhead_us": op_us - raw_us,
                     "launches": launches}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="perf/results")
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " +
                    ", ".join(OPS))
    ap.add_argument("--rounds", type=int, default=50, help="steady-state rounds per op")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--profile", metavar="OP",
                    help="profile OP's first call with a warm cache (cProfile, to stderr)")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="ck_first_call_") as cache:
            _run_child(args.profile, cache, "empty")
            env = dict(os.environ, CUTE_KERNELS_CACHE_DIR=cache, FIRST_CALL_PROFILE="1")
            run = subprocess.run([sys.executable, "-X", "importtime", __file__, "--child",
                                  args.profile], env=env, capture_output=True, text=True)
        imports = [ln for ln in run.stderr.splitlines()
                   if ln.startswith("import time:") and ln.split("|")[1].strip().isdigit()]
        profile = [ln for ln in run.stderr.splitlines() if not ln.startswith("import time")]
        print("\n".join(profile[-70:]))
        print("slowest imports (cumulative us):")
        print("\n".join(sorted(imports, key=lambda ln: -int(ln.split("|")[1]))[:25]))
        print(run.stdout[-600:])
        return
    names = [n for n in args.ops.split(",") if n]
    for n in names:
        if n not in OPS:
            ap.error(f"unknown op {n!r}; known: {', '.join(OPS)}")

    import torch

    from cute_kernels.bench import commit_id, device_name, format_table, save_results

    with tempfile.TemporaryDirectory(prefix="ck_first_call_") as root:
        print(f"first calls: {', '.join(names)} (empty caches, side by side) ...", flush=True)
        first = first_calls(names, root)
        # the parent's kernels come from the children's caches (this process has not
        # compiled anything yet: the cache folder is read at the first lookup)
        merged = os.path.join(root, "_merged")
        merge_caches(root, merged)
        os.environ["CUTE_KERNELS_CACHE_DIR"] = merged
        steady = steady_state(names, args.rounds)
    headers = ["op", "first call, empty cache s", "first call, warm cache s", "second call ms",
               "import ck s", "host us/call", "raw TVM-FFI us/call", "overhead us",
               "dispatcher imported", "DSL imported"]
    rows = []
    for name in names:
        cold, warm, st = first[name]["empty"], first[name]["warm"], steady[name]
        rows.append([name, cold["first_call_s"], warm["first_call_s"],
                     warm["second_call_s"] * 1e3, warm["import_ck_s"], st["op_us"],
                     st["raw_us"], st["overhead_us"],
                     ",".join(warm["dispatcher_modules"][:2]) or "no",
                     "yes" if warm.get("dsl_imported") else "no"])
    print(f"\n{device_name()} | torch {torch.__version__} | commit {commit_id()} | "
          f"{datetime.date.today()}\n")
    print(format_table(headers, rows))
    goals = {"warm_first_call_s_max": max(first[n]["warm"]["first_call_s"] for n in names),
             "warm_first_call_goal_s": WARM_FIRST_CALL_GOAL_S}
    print(f"\nslowest first call with a warm cache: {goals['warm_first_call_s_max']:.3f} s "
          f"(goal <= {WARM_FIRST_CALL_GOAL_S} s): "
          f"{'met' if goals['warm_first_call_s_max'] <= WARM_FIRST_CALL_GOAL_S else 'MISSED'}")
    if "attention" in steady and "linear" in steady:
        gap = steady["attention"]["overhead_us"] - steady["linear"]["overhead_us"]
        goals.update(attention_minus_linear_overhead_us=gap,
                     attention_minus_linear_goal_us=ATTENTION_VS_LINEAR_GOAL_US)
        print(f"attention overhead - linear overhead: {gap:.1f} us (goal <= "
              f"{ATTENTION_VS_LINEAR_GOAL_US:.0f} us): "
              f"{'met' if gap <= ATTENTION_VS_LINEAR_GOAL_US else 'MISSED'}")
    payload = {"device": device_name(), "commit": commit_id(), "date": str(datetime.date.today()),
               "torch": torch.__version__, "headers": headers, "rows": rows,
               "first_calls": first, "steady_state": steady, "goals": goals}
    print("wrote", save_results(args.out, "first_call", payload))


if __name__ == "__main__":
    main()
