"""Resource and occupancy lab: compile any kernel config for sm_120/sm_100/sm_90/sm_89 with no GPU.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32))`` cross-compiles on any
machine; the cuobjdump inside Triton's wheel reads registers, stack and shared memory from the
cubin, ptxas's own log gives the spills, the PTX gives the global loads by width and the
``cp.async`` copies, and the SASS says whether the dots became UTCMMA (tcgen05), HGMMA (Hopper
wgmma), HMMA (mma.sync) or neither. The kernels are compiled from their ``@triton.jit`` functions,
so the lab always sees the code that runs.

Gluon kernels (``@gluon.jit``) compile the same way, through ``GluonASTSource``, with the entry's
``compile_options`` (a launcher's ``maxnreg``) passed to ``triton.compile`` like every launch option. Most are
written for Hopper wgmma: on any target but :data:`GLUON_ARCHS` the lab does not compile them (LLVM
aborts the whole process on the wgmma intrinsics) and reports status ``compile_error``, reason
``skipped: Gluon sm_90 kernel ...``. A portable Gluon kernel (mma.sync, mbarriers, warp specialisation) declares
the targets it is written for in its module, ``LAB_ARCHS`` (:func:`gluon_archs`); the lab compiles it for those
in its own process and for every other target in a child process (:func:`compile_config`), since LLVM may abort
there too (sm_89 has no setmaxnreg, which warp specialisation needs): a crash is a ``compile_error`` row whose
reason starts ``aborted in a child process``, never the lab's own death.

Which kernels: every registry entry with a ``lab_signature`` (:func:`workbench.registry.compiled_kernels`),
each over its whole ``config_space`` with its ``fixed_meta`` switches, plus the kernel that has no
registry entry of its own (:data:`LAB_EXTRAS`: the combine). ``KERNELS`` is read from the registry each
time it is asked for, so a kernel registered later is a choice of ``python -m workbench resources --kernel``
with no other edit.

Per compiled config the table has the flat config columns (``BLOCK_H``, ``BLOCK_T``, ``num_warps``,
``num_stages``, ``PREFETCH`` and the rung's switches such as ``K_BUFFERS``/``F16``), the config's
short ``config`` label, the model's and the compiler's shared bytes, registers, spills, occupancy,
and what the optimisation ladder reads: ``ld_global_{1,2,4,8,16}B`` (static ``ld.global``
instructions in the PTX by bytes per instruction), ``ld_global`` and ``ld_global_avg_bytes``
(their count-weighted mean width), ``cp_async`` (``cp.async.ca/cg.shared.global`` instructions)
with ``cp_async_avg_bytes``, and ``mma`` (the tensor-core instruction kind in the SASS) with
``mma_count`` and the count of each kind (``hgmma``, ``hmma``, ``utcmma``).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field, fields
from typing import Callable

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

from ..kernels.configs import KernelConfig
from .targets import TARGETS, get_target

LOAD_WIDTHS = (1, 2, 4, 8, 16)      # bytes per ld.global instruction the table counts
MMA_KINDS = ("utcmma", "hgmma", "hmma")
GLUON_ARCHS = ("sm_90",)            # the targets the lab compiles Gluon kernels for (Hopper wgmma) unless their
                                    # module declares its own (LAB_ARCHS: gluon_archs)
CHILD_ABORT = "aborted in a child process"  # how a compile_error row from a crashed child compile begins


# ----------------------------------------------------------------------------- which kernels

@dataclass(frozen=True)
class LabKernel:
    """What the lab needs to compile one kernel: its jit object, argument types and configs."""
    name: str
    jit: object                                  # @triton.jit / @gluon.jit (or autotuned) object
    signature: dict                              # runtime argument -> Triton type ("*bf16", "i32", ...)
    constexprs: Callable                         # typed config -> every constexpr of a compile
    configs: tuple                               # typed configs: the whole space the lab compiles
    config_cls: type
    shared_model: Callable | None = None         # typed config[, arch=] -> estimated shared bytes (None: no model)
    fixed_meta: dict = field(default_factory=dict)  # constexpr switches pinned by the entry (table columns)
    compile_options: dict = field(default_factory=dict)  # triton.compile options beyond the config's (maxnreg)


@dataclass(frozen=True)
class CombineConfig(KernelConfig):
    """The combine kernel's config: launch options only."""
    num_stages: int = 3  # triton.Config's default, which the combine's autotune configs keep


def _from_spec(spec, siblings=()) -> LabKernel:
    """A registry entry as the lab sees it.

    A switch that a sibling entry of the same jit function pins but this entry does not (e.g. a variant registered
    for one exploratory run) takes the value a launch that omits it gets: the jit parameter's default, else off
    (0); it becomes a constexpr and a table column of this entry too.
    """
    defaults = _param_defaults(spec.jit)
    switches = {k: defaults.get(k, 0) for s in siblings if s.jit is spec.jit and s is not spec for k in s.fixed_meta}
    fixed = {**switches, **spec.fixed_meta}

    def constexprs(c, _own=spec.lab_constexprs, _fixed=fixed):
        return {**_fixed, **_own(c)}
    return LabKernel(name=spec.name, jit=spec.jit, signature=dict(spec.lab_signature), constexprs=constexprs,
                     configs=tuple(spec.config_space), config_cls=spec.config_cls, shared_model=spec.shared_model,
                     fixed_meta=dict(sorted(fixed.items())), compile_options=dict(spec.compile_options))


def _combine() -> LabKernel:
    from ..kernels import combine
    sig = dict(part_out_ptr="*fp32", part_lse_ptr="*fp32", sink_ptr="*fp32", stride_sink="i32", out_ptr="*bf16",
               lse_ptr="*fp32", H="i32", S_Q="i32", s_total="i32", S_BUCKET="i32")
    return LabKernel(
        name="combine", jit=combine.combine_kernel, signature=sig, config_cls=CombineConfig,
        configs=tuple(CombineConfig.from_triton(c) for c in combine.COMBINE_CONFIGS),
        constexprs=lambda c: dict(HAS_SINK=True, D=512, S_PAD=16, S_CHUNK=combine.S_CHUNK_MAX, RNE_BY_HAND=False,
                                  PDL=False, **c.meta()),  # PDL's griddepcontrol.wait: one instruction, sm_90 only
        # no shared-memory tiles; at most one bf16 output row (2 B x 512) crosses from the split reduction's
        # layout to the 16-byte store's through shared memory (lab: 1 KB at 2 warps, none at 1 and 4)
        shared_model=lambda c: 2 * 512)


# Kernels the lab compiles that have no registry entry with a lab signature. A registry entry of the
# same name (with a lab_signature) takes precedence, so each can move into the registry with no edit here.
LAB_EXTRAS: dict[str, Callable[[], LabKernel]] = {"combine": _combine}


def lab_kernels() -> dict[str, LabKernel]:
    """Every kernel the lab compiles, by name: the registry's compiled kernels, then the extras."""
    from .. import registry
    specs = [registry.get(n) for n in registry.compiled_kernels()]
    out = {s.name: _from_spec(s, specs) for s in specs}
    for name, make in LAB_EXTRAS.items():
        out.setdefault(name, make())
    return out


def lab_kernel(name: str) -> LabKernel:
    kernels = lab_kernels()
    if name not in kernels:
        raise ValueError(f"kernel: expected one of {tuple(kernels)}, got {name!r}")
    return kernels[name]


def __getattr__(name):
    # KERNELS (the CLI's choices) is read from the registry on every access, never frozen at import
    if name == "KERNELS":
        return tuple(lab_kernels())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kernel_configs(kernel: str) -> list:
    """The typed configs the lab compiles for a kernel (its whole config space)."""
    return list(lab_kernel(kernel).configs)


def typed_config(kernel: str | LabKernel, cfg):
    """A config (typed, ``triton.Config``, dict, or a table's ``config`` cell) as the kernel's typed config."""
    lk = lab_kernel(kernel) if isinstance(kernel, str) else kernel
    if isinstance(cfg, KernelConfig):
        return cfg
    if isinstance(cfg, triton.Config):
        return lk.config_cls.from_triton(cfg)
    if isinstance(cfg, str):
        from ..report.results import parse_config
        cfg = parse_config(cfg)
    names = {f.name for f in fields(lk.config_cls)}
    unknown = sorted(set(cfg) - names)
    if unknown:
        raise ValueError(f"config: unknown keys {unknown} for the {lk.name} kernel; expected {sorted(names)}")
    return lk.config_cls(**cfg)


# ----------------------------------------------------------------------------- compiling one config

def _wrapped(obj):
    """The objects down a jit/autotuner/interpreter wrapper chain (``.fn``), the Python function last."""
    while obj is not None:
        yield obj
        obj = getattr(obj, "fn", None)


def _jit_function(obj):
    """The JITFunction (a GluonJITFunction for Gluon) under an autotuner/heuristics wrapper."""
    from triton.runtime.jit import JITFunction
    return next(o for o in _wrapped(obj) if isinstance(o, JITFunction))


def _param_defaults(jit) -> dict:
    """The kernel's parameters that have a default, as a launch that omits them gets it (interpreted or not)."""
    import inspect
    *_, pyfn = _wrapped(jit)
    return {n: p.default for n, p in inspect.signature(pyfn).parameters.items() if p.default is not p.empty}


def is_gluon(lk: LabKernel) -> bool:
    """Whether the kernel is a Gluon (``@gluon.jit``) function."""
    return any(isinstance(o, GluonJITFunction) for o in _wrapped(lk.jit))


def declared_archs(lk: LabKernel) -> tuple[str, ...] | None:
    """The targets a kernel's module declares it is written for (``LAB_ARCHS``: a portable Gluon kernel), or None."""
    import sys
    *_, pyfn = _wrapped(lk.jit)
    archs = getattr(sys.modules.get(getattr(pyfn, "__module__", None)), "LAB_ARCHS", None)
    return tuple(archs) if archs is not None else None


def gluon_archs(lk: LabKernel) -> tuple[str, ...]:
    """The targets the lab compiles a Gluon kernel for in its own process: those its module declares
    (:func:`declared_archs`), else :data:`GLUON_ARCHS` (the Hopper wgmma rungs)."""
    return declared_archs(lk) or GLUON_ARCHS


def compiles_in_child(lk: LabKernel, arch: str) -> bool:
    """Whether the lab compiles the kernel for ``arch`` in a child process: a portable Gluon kernel off the targets
    it declares, where LLVM may abort (warp specialisation on sm_89: setmaxnreg)."""
    return is_gluon(lk) and declared_archs(lk) is not None and get_target(arch).arch not in gluon_archs(lk)


def arch_skip_reason(lk: LabKernel, arch: str) -> str | None:
    """Why the lab does not compile the kernel for ``arch`` at all, or None: the wgmma Gluon kernels only for
    GLUON_ARCHS (a portable one is compiled everywhere, off its own targets in a child process)."""
    arch = get_target(arch).arch
    if is_gluon(lk) and declared_archs(lk) is None and arch not in GLUON_ARCHS:
        return (f"skipped: Gluon sm_90 kernel (Hopper wgmma), not compiled for {arch} "
                "(LLVM aborts the process on its wgmma intrinsics)")
    return None


def _signature_and_constexprs(lk: LabKernel, cfg):
    fn = _jit_function(lk.jit)
    const = {**_param_defaults(lk.jit), **lk.constexprs(cfg)}  # defaulted parameters: as a launch that omits them
    missing = [a for a in fn.arg_names if a not in lk.signature and a not in const]
    if missing:
        raise RuntimeError(f"resource lab: {lk.name} at {cfg.label} has no type or constexpr value for {missing}: "
                           f"complete its lab_signature / lab_constexprs")
    sig = {a: (lk.signature[a] if a in lk.signature else "constexpr") for a in fn.arg_names}
    return fn, sig, {a: v for a, v in const.items() if a in fn.arg_names}


def _attrs(fn, sig):
    """Pointer arguments are 16-byte aligned, like torch allocations; an integer typed ``"i32:16"`` in a
    lab_signature is a multiple of 16, as Triton specialises one at launch (e.g. the q strides, 512-wide rows).
    Integers typed plainly are compiled unspecialised, so loads addressed through them may show narrower here
    than at run time."""
    return {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
            if sig[a].startswith("*") or sig[a].endswith(":16")}


def _plain_types(sig):
    return {a: t.split(":")[0] for a, t in sig.items()}


def _source(fn, sig, const):
    """What triton.compile takes: a GluonASTSource for a Gluon function (its own front end), else an ASTSource."""
    cls = GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource
    return cls(fn, _plain_types(sig), const, attrs=_attrs(fn, sig))


@dataclass
class CompileResult:
    kernel: str
    arch: str
    config: str                 # the typed config's label, e.g. "BLOCK_H=16,BLOCK_T=32,num_warps=4,num_stages=1"
    columns: dict               # flat config columns: the typed config's and the entry's fixed switches
    status: str                 # fits | pruned | over_limit | compile_error (reason "skipped: ...": wrong target)
    reason: str
    model_shared_bytes: int | None
    shared_bytes: int | None = None
    registers: int | None = None
    stack_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    mma: str | None = None      # UTCMMA (tcgen05) | HGMMA (wgmma) | HMMA (mma.sync) | none
    mma_count: int | None = None
    code: dict = field(default_factory=dict)   # instruction counts: loads by width, cp.async, MMA kinds
    blocks_per_sm: int | None = None
    warps_per_sm: int | None = None
    occupancy: float | None = None
    limiter: str | None = None

    def as_row(self) -> dict:
        """One flat table row: kernel, arch, config, its columns, then the numbers."""
        d = {k: getattr(self, k) for k in ("kernel", "arch", "config")}
        d.update(self.columns)
        for f in fields(self):
            if f.name not in ("kernel", "arch", "config", "columns", "code"):
                d[f.name] = getattr(self, f.name)
            if f.name == "mma_count":
                d.update(self.code)
        return d


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


_MMA_PATTERNS = {"utcmma": r"\bUTC\w*MMA\b",  # Blackwell datacenter tensor cores (tcgen05)
                 "hgmma": r"\bHGMMA\b", "hmma": r"\bHMMA\b"}


def mma_counts(sass: str) -> dict:
    """Tensor-core instructions in the SASS, per kind."""
    return {k: len(re.findall(p, sass)) for k, p in _MMA_PATTERNS.items()}


def _mma_kind(sass: str) -> str:
    counts = mma_counts(sass)
    return next((k.upper() for k in MMA_KINDS if counts[k]), "none")


# an ld.global instruction, predicated or not, with its modifiers: ld.global.L1::evict_last.v4.b32 -> 16 B
_LD_GLOBAL = re.compile(r"^\s*(?:@!?%\w+\s+)?ld\.global((?:\.[\w:]+)*)\s", re.M)
_CP_ASYNC = re.compile(r"^\s*(?:@!?%\w+\s+)?cp\.async\.(?:ca|cg)\.shared\.global(?:\.[\w:]+)*\s+"
                       r"\[[^\]]*\]\s*,\s*\[[^\]]*\]\s*,\s*(0x[0-9a-fA-F]+|\d+)", re.M)


def _load_bytes(mods: str) -> int:
    vec = re.search(r"\.v(\d+)\b", mods)
    bits = re.findall(r"\.[bsuf](\d+)\b", mods)
    return (int(vec.group(1)) if vec else 1) * (int(bits[-1]) // 8 if bits else 0)


def ptx_memory_counts(ptx: str) -> dict:
    """Static global loads in PTX by bytes per instruction, and cp.async copies into shared memory.

    ``ld_global_{w}B``: ld.global instructions moving w bytes per thread; ``ld_global_avg_bytes``: their
    count-weighted mean width (a kernel of only 16-byte loads shows 16.0); ``cp_async``: cp.async.ca/cg
    instructions (the compiler-pipelined gathers) and ``cp_async_avg_bytes`` their mean copy size.
    """
    widths = [_load_bytes(m) for m in _LD_GLOBAL.findall(ptx)]
    out = {f"ld_global_{w}B": widths.count(w) for w in LOAD_WIDTHS}
    other = [w for w in widths if w not in LOAD_WIDTHS]
    out["ld_global_other"] = len(other)
    out["ld_global"] = len(widths)
    out["ld_global_avg_bytes"] = round(sum(widths) / len(widths), 3) if widths else 0.0
    cps = [int(s, 0) for s in _CP_ASYNC.findall(ptx)]
    out["cp_async"] = len(cps)
    out["cp_async_avg_bytes"] = round(sum(cps) / len(cps), 3) if cps else 0.0
    return out


def _spills_from_log(log: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return (int(m.group(1)), int(m.group(2))) if m else None


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
    return _spills_from_log(r.stderr + r.stdout) or (-1, -1)


def _compile(src, target, options) -> tuple[object, str]:
    """triton.compile, keeping ptxas's -v log (spills) when it really runs ptxas (not on a cache hit)."""
    from triton import knobs
    buf = io.StringIO()
    old = knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(buf):
            k = triton.compile(src, target=target, options=options)
    finally:
        knobs.nvidia.dump_ptxas_log = old
    return k, buf.getvalue()


def model_shared_bytes(kernel: str | LabKernel, cfg, arch: str | None = None) -> int | None:
    """The kernel's shared-memory model for a config; a model that takes an ``arch`` keyword gets the target
    (tile512's does: wgmma/tcgen05 tiles differ from mma.sync ones), others are target-independent."""
    import inspect
    lk = lab_kernel(kernel) if isinstance(kernel, str) else kernel
    if lk.shared_model is None:
        return None
    cfg = typed_config(lk, cfg)
    try:
        takes_arch = "arch" in inspect.signature(lk.shared_model).parameters
    except (TypeError, ValueError):
        takes_arch = False
    return int(lk.shared_model(cfg, arch=arch) if takes_arch and arch else lk.shared_model(cfg))


def model_prune_reason(lk: LabKernel, model: int | None, arch: str) -> str | None:
    """The shared-memory model's verdict alone (heads not considered): a reason to prune, or None."""
    t = get_target(arch)
    if model is not None and model > t.smem_per_block:
        return f"shared memory ~{model} B > {t.smem_per_block} B per block on {arch}"
    return None


def _compile_lab_kernel(lk: LabKernel, arch: str, cfg, constexprs: dict | None = None) -> tuple[object, str]:
    """(compiled kernel, ptxas log) of one typed config for one target, as a launch compiles it; ``constexprs``
    replace the lab's values of those constexprs."""
    from ..kernels.tuning import target_override
    fn, sig, const = _signature_and_constexprs(lk, cfg)
    unknown = set(constexprs or {}) - set(const)
    if unknown:
        raise ValueError(f"{lk.name}: no constexpr {sorted(unknown)} (it has {sorted(const)})")
    const = {**const, **(constexprs or {})}
    with target_override(arch):
        return _compile(_source(fn, sig, const), GPUTarget("cuda", get_target(arch).capability, 32),
                        {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages, **lk.compile_options})


def compiled_ptx(kernel: str, arch: str, cfg, **constexprs) -> str:
    """The PTX of one config (typed, dict or ``triton.Config``) for one target, for reading the code itself
    (instruction order, barriers) where the table's counts are not enough (no GPU); keyword arguments set
    constexprs the lab otherwise fixes (e.g. the combine's PDL=True, as sm_90 launches it)."""
    return _compiled(kernel, arch, cfg, constexprs).asm["ptx"]


def compiled_sass(kernel: str, arch: str, cfg, **constexprs) -> str:
    """The SASS of one config for one target, as :func:`compiled_ptx` gives its PTX: for what only ptxas decides
    (e.g. whether it serialised a kernel's wgmmas: one ``WARPGROUP.DEPBAR`` per HGMMA, its C7515 warning)."""
    return _read_cubin(_compiled(kernel, arch, cfg, constexprs).asm["cubin"])[1]


def _compiled(kernel: str, arch: str, cfg, constexprs: dict):
    """The compiled kernel of one config (typed, dict or ``triton.Config``) of a registered lab kernel."""
    _check_compilable()
    lk = lab_kernel(kernel)
    return _compile_lab_kernel(lk, arch, typed_config(lk, cfg), constexprs)[0]


def compile_config(kernel: str, arch: str, cfg, *, respect_pruning: bool = False,
                   isolate: bool = True) -> CompileResult:
    """Compile one config (typed, dict or ``triton.Config``) for one target and read its resources (no GPU).

    isolate: compile in a child process where :func:`compiles_in_child` says LLVM may abort (the child runs this
    with ``isolate=False``; it imports the package afresh, so the kernel must be one the catalogue registers)."""
    _check_compilable()
    lk = lab_kernel(kernel)
    target = get_target(arch)
    cfg = typed_config(lk, cfg)
    model = model_shared_bytes(lk, cfg, arch)
    reason = model_prune_reason(lk, model, arch)
    base = dict(kernel=kernel, arch=arch, config=cfg.label, columns={**cfg.columns(), **lk.fixed_meta},
                model_shared_bytes=model)
    skip = arch_skip_reason(lk, arch)
    if skip:
        return CompileResult(**base, status="compile_error", reason=skip)
    if reason and respect_pruning:
        return CompileResult(**base, status="pruned", reason=reason)
    if isolate and compiles_in_child(lk, arch):
        return _compile_in_child(kernel, arch, cfg, base, respect_pruning)
    try:
        k, log = _compile_lab_kernel(lk, arch, cfg)
    except Exception as e:  # noqa: BLE001 - the reason is the result
        msg = str(e).strip().splitlines()
        detail = [ln for ln in msg if re.search(r"error\s+:", ln)]  # ptxas's own line, e.g. "requires sm_90"
        short = next((ln for ln in detail + msg if "out of resource" in ln or "error" in ln.lower()),
                     msg[-1] if msg else "")
        return CompileResult(**base, status="compile_error", reason=f"{type(e).__name__}: {short}"[:300])
    usage, sass = _read_cubin(k.asm["cubin"])
    shared = int(k.metadata.shared)
    over = shared > target.smem_per_block or usage["registers"] > target.max_regs_per_thread
    # the block's warps as compiled: a warp-specialised kernel's worker partitions come on top of its num_warps
    # (wgmma_ws: 4 + 8), each at the kernel's register count
    occ = target.occupancy(num_warps=int(k.metadata.num_warps), regs_per_thread=usage["registers"],
                           shared_bytes=shared)
    spill_st, spill_ld = _spills_from_log(log) or _ptxas_spills(k)
    status = "over_limit" if over else ("pruned" if reason else "fits")
    why = (f"compiled shared {shared} B > {target.smem_per_block} B per block" if over
           else (reason or "fits"))
    counts = mma_counts(sass)
    kind = _mma_kind(sass)
    return CompileResult(**base, status=status, reason=why, shared_bytes=shared, registers=usage["registers"],
                         stack_bytes=usage["stack"], spill_stores=spill_st, spill_loads=spill_ld, mma=kind,
                         mma_count=counts.get(kind.lower(), 0), code={**ptx_memory_counts(k.asm["ptx"]), **counts},
                         **occ)


def _compile_in_child(kernel: str, arch: str, cfg, base: dict, respect_pruning: bool) -> CompileResult:
    """compile_config in a fresh process: its result, or, where the process dies (LLVM aborts it), a
    compile_error whose reason is CHILD_ABORT and the child's last error line."""
    import json
    import sys
    code = ("import dataclasses, json; from workbench.lab.resources import compile_config\n"
            f"r = compile_config({kernel!r}, {arch!r}, {cfg.columns()!r}, respect_pruning={respect_pruning!r}, "
            "isolate=False)\n"
            "print(json.dumps(dataclasses.asdict(r)))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode == 0:
        return CompileResult(**json.loads(r.stdout.strip().splitlines()[-1]))
    lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
    last = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")
    why = f"{CHILD_ABORT} (exit {r.returncode}): {last}"[:300]
    return CompileResult(**base, status="compile_error", reason=why)


# ----------------------------------------------------------------------------- processes, sweeps, tables

def without_interpreter(code: str) -> str:
    """Run Python code in a fresh process without TRITON_INTERPRET (kernels compile there); return its stdout."""
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"compile process failed:\n{r.stderr[-2000:]}")
    return r.stdout.strip()


def _check_compilable():
    from ..kernels.common import INTERPRET
    if INTERPRET:
        raise RuntimeError("the resource lab compiles kernels, which TRITON_INTERPRET=1 prevents in this process; "
                           "use lab_frame(...) (it runs a separate process) or `python -m workbench resources`")


def lab_frame(arch: str = "sm_120", kernel: str = "mma", configs: list[dict] | None = None, setup: str = ""):
    """Resource table for (arch, kernel[, configs]) from a separate compile process; works under the interpreter.

    ``setup``: Python run first in that process (e.g. importing a module that registers a kernel).
    """
    import json

    import pandas as pd
    code = (f"{setup}\n"
            "import json; from workbench.lab.resources import compile_config, sweep\n"
            f"cfgs = json.loads({json.dumps(configs)!r})\n"
            f"res = [compile_config({kernel!r}, {arch!r}, c) for c in cfgs] if cfgs else "
            f"sweep({arch!r}, {kernel!r}, False)\n"
            "print(json.dumps([r.as_row() for r in res]))")
    return to_frame(json.loads(without_interpreter(code).splitlines()[-1]))


def sweep_jobs(arch: str = "sm_120", kernel: str = "mma") -> list[tuple[str, str, object]]:
    """(kernel, arch, typed config) for every compile a sweep makes; 'all' for every kernel or target."""
    archs = list(TARGETS) if arch == "all" else [get_target(arch).arch]
    kernels = lab_kernels()
    names = list(kernels) if kernel == "all" else [lab_kernel(kernel).name]
    return [(k, a, c) for a in archs for k in names for c in kernels[k].configs]


def sweep(arch: str = "sm_120", kernel: str = "mma", progress: bool = True) -> list[CompileResult]:
    """Compile the whole config space of a kernel (or 'all' of them) for a target (or 'all').

    Configs the pruning model drops are still compiled, so the model can be checked
    against the compiler: status 'pruned' with compiled numbers shows whether the
    model was right to drop them.
    """
    from tqdm.auto import tqdm
    jobs = sweep_jobs(arch, kernel)
    return [compile_config(k, a, c) for k, a, c in tqdm(jobs, desc="compile", disable=not progress)]


FRONT = ("kernel", "arch", "config")
CONFIG_COLUMNS = ("BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH")


def to_frame(results):
    """A lab table: CompileResults (or their rows) as one frame, config columns after kernel/arch/config."""
    import pandas as pd
    rows = [r.as_row() if isinstance(r, CompileResult) else dict(r) for r in results]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    known = {k for lk in lab_kernels().values() for k in (*lk.fixed_meta, *(f.name for f in fields(lk.config_cls)))}
    switches = [c for c in df.columns if c in known and c not in CONFIG_COLUMNS]
    cfg_cols = [c for c in CONFIG_COLUMNS if c in df.columns] + switches
    for c in cfg_cols:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    order = [*FRONT, *cfg_cols]
    return df[order + [c for c in df.columns if c not in order]]


def apply_model(df):
    """Recompute the pruning model's columns (model_shared_bytes, status, reason) of a lab table with the current code.

    The compiled numbers do not depend on the model, so a table stays valid when the model changes. The config
    cell may be an old ``str(dict)`` or a new label (:func:`workbench.report.results.parse_config` reads both);
    rows of a kernel the lab no longer knows keep their columns. The fixed switches come from the current registry
    entry.
    """
    from ..report.results import parse_config
    df = df.copy()
    kernels = lab_kernels()
    for i, r in df.iterrows():
        lk = kernels.get(r["kernel"])
        if lk is None:
            continue
        cfg = typed_config(lk, parse_config(r["config"]))
        model = model_shared_bytes(lk, cfg, r["arch"])
        df.at[i, "model_shared_bytes"] = model
        if r["status"] in ("fits", "pruned"):
            reason = model_prune_reason(lk, model, r["arch"])
            df.at[i, "status"], df.at[i, "reason"] = ("pruned", reason) if reason else ("fits", "fits")
    return df


PRINT_COLUMNS = ["kernel", "arch", "BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH", "status",
                 "model_shared_bytes", "shared_bytes", "registers", "spill_stores", "mma", "ld_global_avg_bytes",
                 "cp_async", "warps_per_sm", "limiter"]


def sweep_to_csv(arch="sm_120", kernel="mma", csv=None, progress=True):
    import datetime as dt

    from ..report.provenance import git_commit
    commit, date = git_commit(), dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # the code compiled
    df = to_frame(sweep(arch, kernel, progress))
    df["triton"] = triton.__version__
    df["git_commit"] = commit
    df["date"] = date
    if csv:
        df.to_csv(csv, index=False)
    print(df[[c for c in PRINT_COLUMNS if c in df.columns]].to_string(index=False))
    return df
