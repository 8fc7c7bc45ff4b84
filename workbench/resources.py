"""Resource and occupancy lab: compile any kernel config for sm_120/sm_100/sm_90/sm_89 with no GPU.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32))`` cross-compiles on any
machine; the cuobjdump inside Triton's wheel reads registers, stack and spills from the
cubin; the SASS says whether the dots became HGMMA (Hopper wgmma), HMMA (mma.sync) or
neither. The kernels are compiled from their ``@triton.jit`` functions, so the lab always
sees the code that runs.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from .kernels import combine as combine_mod
from .kernels import mma as mma_mod
from .kernels import simt as simt_mod
from .kernels.common import config_dict, layout_constexprs, target_override
from .targets import TARGETS, get_target

KERNELS = ("mma", "simt", "combine")


def _ptr(dtype):
    return "*" + dtype


# argument types; pointers are 16-byte aligned like torch allocations
_MMA_SIG = dict(q_ptr=_ptr("bf16"), stride_qb="i32", stride_qs="i32", stride_qh="i32", cache_f8=_ptr("fp8e4nv"),
                cache_u8=_ptr("u8"), cache_bf16=_ptr("bf16"), stride_page="i64", block_size="i32", num_tokens="i32",
                idx_ptr=_ptr("i32"), stride_ib="i32", stride_is="i32", topk_len_ptr=_ptr("i32"),
                part_out_ptr=_ptr("fp32"), part_lse_ptr=_ptr("fp32"), sm_scale_log2="fp32", H="i32", S_Q="i32",
                TOPK="i32", split_offset="i32", tokens_per_split="i32", s_total="i32", TOKENS_BUCKET="i32",
                QUERIES_BUCKET="i32")
_SIMT_SIG = dict(q_ptr=_ptr("bf16"), stride_qb="i32", stride_qs="i32", stride_qh="i32",
                 **{f"{p}{k}": v for p in ("", "x_") for k, v in dict(
                     cache_f8=_ptr("fp8e4nv"), cache_u8=_ptr("u8"), cache_bf16=_ptr("bf16"), stride_page="i64",
                     block_size="i32", num_tokens="i32", idx_ptr=_ptr("i32"), stride_ib="i32", stride_is="i32",
                     topk_len_ptr=_ptr("i32")).items()},
                 TOPK="i32", X_TOPK="i32", sink_ptr=_ptr("fp32"), out_ptr=_ptr("bf16"), lse_ptr=_ptr("fp32"),
                 sm_scale_log2="fp32", H="i32", S_Q="i32", TOPK_BUCKET="i32")
_COMBINE_SIG = dict(part_out_ptr=_ptr("fp32"), part_lse_ptr=_ptr("fp32"), sink_ptr=_ptr("fp32"),
                    out_ptr=_ptr("bf16"), lse_ptr=_ptr("fp32"), H="i32", S_Q="i32", s_total="i32", S_BUCKET="i32")


def _jit_fn(kernel: str):
    return {"mma": mma_mod.mma_partial_kernel, "simt": simt_mod.simt_kernel,
            "combine": combine_mod.combine_kernel}[kernel].fn


def kernel_configs(kernel: str) -> list[triton.Config]:
    return {"mma": mma_mod.MMA_CONFIG_SPACE, "simt": simt_mod.SIMT_CONFIGS, "combine": combine_mod.COMBINE_CONFIGS}[kernel]


def _signature_and_constexprs(kernel: str, cfg: triton.Config):
    if kernel == "mma":
        sig = dict(_MMA_SIG)
        const = dict(HAS_TOPK_LEN=False, DOT_FP32=False, **layout_constexprs(),
                     **{"PREFETCH": mma_mod.DEFAULT_PREFETCH, **cfg.kwargs})
    elif kernel == "simt":
        sig = dict(_SIMT_SIG)
        const = dict(HAS_TOPK_LEN=False, HAS_EXTRA=False, X_HAS_TOPK_LEN=False, HAS_SINK=True, RNE_BY_HAND=False,
                     **layout_constexprs(), **cfg.kwargs)
    elif kernel == "combine":
        sig = dict(_COMBINE_SIG)
        const = dict(HAS_SINK=True, D=512, S_PAD=16, RNE_BY_HAND=False, **cfg.kwargs)
    else:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    fn = _jit_fn(kernel)
    missing = [a for a in fn.arg_names if a not in sig and a not in const]
    if missing:
        raise RuntimeError(f"resource lab signature for {kernel} lacks {missing}: update resources.py")
    full = {a: (sig[a] if a in sig else "constexpr") for a in fn.arg_names}
    return fn, full, const


def _attrs(fn, sig):
    return {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if sig[a].startswith("*")}


@dataclass
class CompileResult:
    kernel: str
    arch: str
    config: str
    BLOCK_H: int | None
    BLOCK_T: int | None
    num_warps: int
    num_stages: int
    status: str                 # fits | pruned | over_limit | compile_error
    reason: str
    model_shared_bytes: int | None
    shared_bytes: int | None
    registers: int | None
    stack_bytes: int | None
    spill_stores: int | None
    spill_loads: int | None
    mma: str | None             # UTCMMA (tcgen05) | HGMMA (wgmma) | HMMA (mma.sync) | none
    blocks_per_sm: int | None = None
    warps_per_sm: int | None = None
    occupancy: float | None = None
    limiter: str | None = None


def _cuobjdump() -> str:
    import triton.backends.nvidia as nv
    return os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")


def _read_cubin(cubin: bytes) -> tuple[dict, str]:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        res = subprocess.run([_cuobjdump(), "--dump-resource-usage", path], capture_output=True, text=True, check=True)
        sass = subprocess.run([_cuobjdump(), "--dump-sass", path], capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    usage = {}
    for key, pat in (("registers", r"REG:(\d+)"), ("stack", r"STACK:(\d+)"), ("shared", r"SHARED:(\d+)"),
                     ("local", r"LOCAL:(\d+)")):
        m = re.search(pat, res.stdout)
        usage[key] = int(m.group(1)) if m else 0
    return usage, sass


def _mma_kind(sass: str) -> str:
    if re.search(r"\bUTC\w*MMA\b", sass):  # Blackwell datacenter tensor cores (tcgen05)
        return "UTCMMA"
    if re.search(r"\bHGMMA\b", sass):
        return "HGMMA"
    if re.search(r"\bHMMA\b", sass):
        return "HMMA"
    return "none"


def model_shared_bytes(kernel: str, cfg: triton.Config) -> int:
    kw = cfg.kwargs
    if kernel == "mma":
        return mma_mod.estimate_mma_shared_bytes(kw["BLOCK_H"], kw["BLOCK_T"], cfg.num_warps, cfg.num_stages,
                                                 kw.get("PREFETCH", mma_mod.DEFAULT_PREFETCH))
    if kernel == "simt":
        return simt_mod.estimate_simt_shared_bytes(kw["BLOCK_T"], cfg.num_warps)
    return 0


def compile_config(kernel: str, arch: str, cfg: triton.Config | dict, *, respect_pruning: bool = False
                   ) -> CompileResult:
    """Compile one config for one target and read its resources (no GPU needed)."""
    _check_compilable()
    target = get_target(arch)
    if isinstance(cfg, dict):
        cfg = triton.Config({k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")},
                            num_warps=cfg.get("num_warps", 4), num_stages=cfg.get("num_stages", 1))
    model = model_shared_bytes(kernel, cfg)
    reason = None
    if kernel == "mma":
        _, reason = mma_mod.mma_prune_reason(cfg, 0, target)  # the shared-memory model alone
    base = dict(kernel=kernel, arch=arch, config=str(config_dict(cfg)), BLOCK_H=cfg.kwargs.get("BLOCK_H"),
                BLOCK_T=cfg.kwargs.get("BLOCK_T"), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                model_shared_bytes=model)
    empty = dict(shared_bytes=None, registers=None, stack_bytes=None, spill_stores=None, spill_loads=None, mma=None)
    if reason and respect_pruning:
        return CompileResult(**base, status="pruned", reason=reason, **empty)
    fn, sig, const = _signature_and_constexprs(kernel, cfg)
    src = ASTSource(fn, sig, const, attrs=_attrs(fn, sig))
    try:
        with target_override(arch):
            k = triton.compile(src, target=GPUTarget("cuda", target.capability, 32),
                               options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    except Exception as e:  # noqa: BLE001 - the reason is the result
        msg = str(e).strip().splitlines()
        short = next((ln for ln in msg if "out of resource" in ln or "error" in ln.lower()), msg[-1] if msg else "")
        return CompileResult(**base, status="compile_error", reason=f"{type(e).__name__}: {short}"[:300], **empty)
    usage, sass = _read_cubin(k.asm["cubin"])
    shared = int(k.metadata.shared)
    stack = usage["stack"]
    over = shared > target.smem_per_block or usage["registers"] > target.max_regs_per_thread
    occ = target.occupancy(num_warps=cfg.num_warps, regs_per_thread=usage["registers"], shared_bytes=shared)
    spill_st, spill_ld = _ptxas_spills(k)
    status = "over_limit" if over else ("pruned" if reason else "fits")
    why = (f"compiled shared {shared} B > {target.smem_per_block} B per block" if over
           else (reason or "fits"))
    return CompileResult(**base, status=status, reason=why, shared_bytes=shared, registers=usage["registers"],
                         stack_bytes=stack, spill_stores=spill_st, spill_loads=spill_ld, mma=_mma_kind(sass),
                         **occ)


def _ptxas_spills(k) -> tuple[int, int]:
    """Spill bytes from ptxas -v on the kernel's PTX for the same target."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptx = k.asm["ptx"]
    arch = k.metadata.target.arch
    sm = f"sm_{arch}a" if arch in (90, 100, 120) else f"sm_{arch}"
    ptxas = get_ptxas(arch).path
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.ptx")
        with open(p, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas, "-v", f"--gpu-name={sm}", p, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr + r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)


def without_interpreter(code: str) -> str:
    """Run Python code in a fresh process without TRITON_INTERPRET (kernels compile there); return its stdout."""
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"compile process failed:\n{r.stderr[-2000:]}")
    return r.stdout.strip()


def _check_compilable():
    from .kernels.common import INTERPRET
    if INTERPRET:
        raise RuntimeError("the resource lab compiles kernels, which TRITON_INTERPRET=1 prevents in this process; "
                           "use lab_frame(...) (it runs a separate process) or `python -m workbench resources`")


def lab_frame(arch: str = "sm_120", kernel: str = "mma", configs: list[dict] | None = None):
    """Resource table for (arch, kernel[, configs]) from a separate compile process; works under the interpreter."""
    import json

    import pandas as pd
    code = ("import json, dataclasses; from workbench.resources import compile_config, sweep;"
            f"cfgs = {json.dumps(configs)};"
            f"res = [compile_config({kernel!r}, {arch!r}, c) for c in cfgs] if cfgs else sweep({arch!r}, {kernel!r}, False);"
            "print(json.dumps([dataclasses.asdict(r) for r in res]))")
    return pd.DataFrame(json.loads(without_interpreter(code).splitlines()[-1]))


def sweep(arch: str = "sm_120", kernel: str = "mma", progress: bool = True) -> list[CompileResult]:
    """Compile the whole shipped config space of a kernel for a target.

    Configs the pruning model drops are still compiled, so the model can be checked
    against the compiler: status 'pruned' with compiled numbers shows whether the
    model was right to drop them.
    """
    from tqdm.auto import tqdm
    archs = list(TARGETS) if arch == "all" else [arch]
    kernels = list(KERNELS) if kernel == "all" else [kernel]
    jobs = [(k, a, c) for a in archs for k in kernels for c in kernel_configs(k)]
    return [compile_config(k, a, c) for k, a, c in tqdm(jobs, desc="compile", disable=not progress)]


def apply_model(df):
    """Recompute the pruning model's columns (model_shared_bytes, status) of a lab table with the current code.

    The compiled numbers do not depend on the model, so a table stays valid when the model changes.
    """
    import ast
    df = df.copy()
    for i, r in df.iterrows():
        cfg_d = ast.literal_eval(r["config"])
        cfg = triton.Config({k: v for k, v in cfg_d.items() if k not in ("num_warps", "num_stages")},
                            num_warps=cfg_d["num_warps"], num_stages=cfg_d["num_stages"])
        df.at[i, "model_shared_bytes"] = model_shared_bytes(r["kernel"], cfg)
        if r["status"] in ("fits", "pruned"):
            reason = mma_mod.mma_prune_reason(cfg, 0, get_target(r["arch"]))[1] if r["kernel"] == "mma" else None
            df.at[i, "status"], df.at[i, "reason"] = ("pruned", reason) if reason else ("fits", "fits")
    return df


def to_frame(results):
    import pandas as pd
    return pd.DataFrame([asdict(r) for r in results])


def sweep_to_csv(arch="sm_120", kernel="mma", csv=None, progress=True):
    import datetime as dt

    from .provenance import git_commit
    df = to_frame(sweep(arch, kernel, progress))
    df["triton"] = triton.__version__
    df["git_commit"] = git_commit()
    df["date"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if csv:
        df.to_csv(csv, index=False)
    cols = ["kernel", "arch", "BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "status", "model_shared_bytes",
            "shared_bytes", "registers", "spill_stores", "mma", "warps_per_sm", "limiter"]
    print(df[cols].to_string(index=False))
    return df
