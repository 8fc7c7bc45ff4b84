"""What the bench times: one provider per thing it can run, built from the kernel registry.

A provider's ``prepare(kw, config)`` takes one rotation's decode keyword arguments (from
:class:`workbench.bench.sweeps.InputPool`) and returns a zero-argument callable that runs one call; all
setup happens in ``prepare``, outside the timed region. A provider that cannot run here raises
:class:`Skip`, whose message the bench records as the row's reason.

- every decode in the registry (and "auto", "reference"): :class:`WorkbenchProvider`;
- the same decode through a plan ("auto+plan", any decode name + "+plan"): :class:`PlanProvider`;
- the same decode with its combine forced to a programmatic dependent or an ordinary launch ("+pdl",
  "+serial"): :class:`CombineLaunchProvider`;
- the default decode as the torch op inside a ``torch.compile(fullgraph=True)`` module ("auto+compiled"):
  :class:`CompiledOpProvider`;
- what "auto" runs on a GPU without wgmma, run here ("auto_portable"): :class:`AutoPortableProvider`;
- every probe (the gather floor): :class:`ProbeProvider`;
- the host's floor for a call of one or two launches ("launch_floor", "launch_floor2"): empty kernels launched
  the way a plan launches, :class:`LaunchFloorProvider`;
- FlashMLA's SM90 MODEL1 decode: :class:`FlashMLAProvider`.
"""
from __future__ import annotations

import importlib
import inspect

import torch
import triton

from . import isolate
from ..decode import sparse_mla_decode
from ..format.layout import MODEL1


class Skip(Exception):
    """A provider cannot run this shape here; the message is recorded as the reason."""


def flashmla_unusable() -> str | None:
    """Why FlashMLA cannot run here, or None where it can: the reason its bench rows are skipped with (and the
    check table's ``flashmla_reason``). Its legacy MODEL1 kernel (sgl-flash-mla, ``use_legacy=True``) is built for
    Hopper only, so any GPU but an sm_90 one is refused before flash_mla is imported (on sm_120 the package may
    import and then fail); on sm_90, flash_mla must import."""
    if not torch.cuda.is_available():
        return "FlashMLA's legacy MODEL1 kernel needs an sm_90 GPU (no CUDA GPU here)"
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        return f"FlashMLA's legacy MODEL1 kernel needs an sm_90 GPU, and this one is sm_{major}{minor}"
    try:
        importlib.import_module("flash_mla")
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        return f"flash_mla not importable ({type(e).__name__}: {e}); install the 'peers' extra"
    return None


def flashmla_line() -> str:
    """One line for the log of a GPU session (scripts/gpu_session.sh prints it first): whether FlashMLA runs on this
    GPU, and where it does not, why, which is the reason its rows carry."""
    where = "here"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        where = f"on this GPU ({torch.cuda.get_device_name()}, sm_{major}{minor})"
    reason = flashmla_unusable()
    if reason:
        return f"flash_mla: not usable {where}: {reason}; its bench and check rows are skipped with this reason"
    return f"flash_mla: usable {where}; its rows are timed and checked"


class FlashMLAProvider:
    """FlashMLA's SM90 MODEL1 decode (sgl-flash-mla, use_legacy=True); fewer than 64 heads are padded to 64."""

    name = "flashmla"

    def __init__(self):
        reason = flashmla_unusable()
        if reason:
            raise Skip(reason)
        self.fm = importlib.import_module("flash_mla")

    def prepare(self, kw: dict, config=None):
        if config is not None:
            raise Skip("FlashMLA takes no kernel config")
        h = kw["q"].shape[2]
        if h > 128:
            raise Skip(f"FlashMLA supports 64 or 128 heads, got {h}")
        hp = 64 if h <= 64 else 128
        q = kw["q"] if h == hp else torch.nn.functional.pad(kw["q"], (0, 0, 0, hp - h))
        sink = kw.get("attn_sink")
        if sink is not None and h != hp:
            sink = torch.nn.functional.pad(sink, (0, hp - h))
        meta = self.fm.get_mla_metadata()[0]
        args = dict(softmax_scale=kw["sm_scale"], indices=kw["indices"], attn_sink=sink,
                    topk_length=kw.get("topk_length"), extra_k_cache=kw.get("extra_cache"),
                    extra_indices_in_kvcache=kw.get("extra_indices"),
                    extra_topk_length=kw.get("extra_topk_length"), use_legacy=True)

        def run():
            out, lse = self.fm.flash_mla_with_kvcache(q, kw["cache"], None, None, MODEL1.d, meta, **args)
            return out[:, :, :h], lse[:, :h]
        return run


def not_on_this_gpu(impl: str) -> str | None:
    """Why a registered kernel cannot run on this CUDA GPU (a Gluon kernel off the targets its module is written
    for, as the lab decides: resources.gluon_archs), or None. A sweep then skips its rows instead of stopping."""
    from .. import registry
    from ..lab.resources import gluon_archs, is_gluon, lab_kernels
    from ..lab.targets import target_for_capability
    lab = lab_kernels()
    if impl not in registry.names() or impl not in lab or not is_gluon(lab[impl]):
        return None
    major, minor = torch.cuda.get_device_capability()
    try:
        arch = target_for_capability(major, minor).arch
    except ValueError:
        arch = f"sm_{major}{minor}"
    archs = gluon_archs(lab[impl])
    return None if arch in archs else f"{impl} is a Gluon kernel written for {', '.join(archs)}; this GPU is {arch}"


class WorkbenchProvider:
    def __init__(self, impl: str):
        self.name = impl
        if impl != "reference" and not torch.cuda.is_available():
            from ..kernels.common import INTERPRET
            if not INTERPRET:
                raise Skip("no CUDA GPU (and TRITON_INTERPRET is not set)")
        elif impl not in ("reference", "auto") and (reason := not_on_this_gpu(base_impl(impl))):
            raise Skip(reason)

    def prepare(self, kw: dict, config=None):
        if self.name == "reference" and config is not None:
            raise Skip("the reference takes no kernel config")
        return lambda: sparse_mla_decode(**kw, impl=self.name, config=config)


AUTO_PORTABLE = "auto_portable"
PORTABLE_PROXY = "sm_120"  # the GPU without wgmma whose "auto" the auto_portable provider runs


class AutoPortableProvider(WorkbenchProvider):
    """What "auto" would run on a GPU without wgmma (``registry.auto_kernel`` for sm_120), run here by name: on the
    H200 its rows are the proxy time of the portable default. Its rows record that kernel, as auto's do."""

    def __init__(self):
        super().__init__(AUTO_PORTABLE)

    def prepare(self, kw: dict, config=None):
        q = kw["q"]
        b, s_q, h, _ = q.shape
        tokens = b * s_q * (kw["indices"].shape[-1] + (kw["extra_indices"].shape[-1]
                                                        if kw.get("extra_indices") is not None else 0))
        impl = portable_impl(heads=h, tokens=tokens, queries=b * s_q)
        if q.is_cuda and (reason := not_on_this_gpu(impl)):  # e.g. portable_ws on sm_89: a skipped row, no abort
            raise Skip(reason)
        return lambda: sparse_mla_decode(**kw, impl=impl, config=config)


def portable_impl(*, heads: int, tokens: int, queries: int | None = None) -> str:
    from .. import registry
    return registry.auto_kernel(PORTABLE_PROXY, heads=heads, tokens=tokens, queries=queries)


PLAN = "+plan"  # suffix of a decode provider that launches through a plan
COMBINE_LAUNCH = {"+pdl": True, "+serial": False}  # suffixes that force how the combine is launched


class CombineLaunchProvider(WorkbenchProvider):
    """A decode whose combine is forced to a programmatic dependent launch ("+pdl") or an ordinary one
    ("+serial") whatever its split count (:func:`workbench.decode.combine_pdl`): the A/B behind the rule. Only
    for kernels that ask for PDL (``auto``: where it runs one); the two share the combine's autotuned config (its
    key does not hold the launch kind), so the A/B compares launches, not configs."""

    def __init__(self, impl: str, suffix: str):
        from .. import registry
        if impl != "auto" and not registry.get(impl).pdl:
            raise ValueError(f"provider: {impl!r} never launches its combine as a programmatic dependent, so "
                             f"{impl + suffix!r} would time the plain decode under another name")
        super().__init__(impl)
        self.impl, self.name, self.pdl = impl, impl + suffix, COMBINE_LAUNCH[suffix]

    def prepare(self, kw: dict, config=None):
        from ..decode import INPUT_NAMES, call_splits, combine_launch, decode_scopes, resolve_call, runs_direct
        spec, _ = resolve_call(**{k: kw.get(k) for k in INPUT_NAMES}, sm_scale=kw.get("sm_scale"),
                               impl=self.impl)  # the kernel the decode will run, as decode picks it
        if not spec.pdl:
            raise Skip(f"{self.impl} runs {spec.name} here, whose combine is never a programmatic dependent launch")
        if runs_direct(spec, call_splits(spec, kw["q"], decode_scopes(kw["cache"], kw["indices"], None,
                                                                        kw.get("extra_cache"),
                                                                        kw.get("extra_indices")))):
            raise Skip(f"{self.impl} runs {spec.name} here in one split, which writes out itself: no combine")

        def run():
            with combine_launch(self.pdl):
                return sparse_mla_decode(**kw, impl=self.impl, config=config)
        return run


def _plan_key(kw: dict, config) -> tuple:
    """What a plan is tied to: every argument's shape, strides, dtype and device (not its data), the rest by value."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), tuple(v.stride()), str(v.dtype), str(v.device))
        return repr(v)
    return tuple(sorted((k, one(v)) for k, v in kw.items())) + (repr(config),)


class PlanProvider(WorkbenchProvider):
    """A decode through a plan (issue 10): ``workbench.plan_decode`` once per input shape, in ``prepare`` (outside
    the timed region), then ``sparse_mla_decode(..., plan=plan)``, which launches with no validation or allocation
    and returns the plan's own buffers. A plan is tied to the inputs' shapes and strides, not to their data, so
    the one plan serves every rotation of a shape; a new shape replaces it."""

    def __init__(self, impl: str):
        super().__init__(impl)
        self.impl, self.name = impl, impl + PLAN
        self.plan_decode = getattr(importlib.import_module("..", __package__), "plan_decode", None)
        if self.plan_decode is None:
            raise Skip("workbench.plan_decode does not exist in this checkout (issue 10's plan API): no plan to time")
        if "plan" not in inspect.signature(sparse_mla_decode).parameters:
            raise Skip("sparse_mla_decode takes no plan= in this checkout (issue 10's plan API): no plan to time")
        self._key, self._plan = None, None

    def prepare(self, kw: dict, config=None):
        key = _plan_key(kw, config)
        if key != self._key:
            self._key, self._plan = None, None  # let the old plan's buffers go before the new one is made
            self._plan = self.plan_decode(**kw, impl=self.impl, config=config)
            self._key = key
        plan = self._plan
        return lambda: sparse_mla_decode(**kw, plan=plan)


COMPILED = "+compiled"  # suffix of a decode provider that runs as torch.ops.workbench.sparse_mla_decode, compiled


class DecodeModule(torch.nn.Module):
    """An engine's attention step around the torch op: what ``torch.compile`` sees in a model."""

    def __init__(self, impl: str, sm_scale: float):
        super().__init__()
        self.impl, self.sm_scale = impl, sm_scale

    def forward(self, q, cache, indices, attn_sink=None, topk_length=None, extra_cache=None, extra_indices=None,
                extra_topk_length=None):
        return torch.ops.workbench.sparse_mla_decode(q, cache, indices, self.sm_scale, attn_sink, topk_length,
                                                     extra_cache, extra_indices, extra_topk_length, self.impl)


class CompiledOpProvider(WorkbenchProvider):
    """The decode as ``torch.ops.workbench.sparse_mla_decode`` in a module compiled with
    ``torch.compile(fullgraph=True)`` (inductor): the engine path of the op. Compiled and run once in ``prepare``."""

    def __init__(self, impl: str):
        super().__init__(impl)
        if not torch.cuda.is_available():
            raise Skip("the compiled op is timed on a CUDA GPU")
        from .. import ops  # noqa: F401 - registers the op
        self.impl, self.name, self._compiled = impl, impl + COMPILED, {}

    def prepare(self, kw: dict, config=None):
        if config is not None:
            raise Skip("the op takes no kernel config")
        sm_scale = kw.get("sm_scale")
        if sm_scale not in self._compiled:
            self._compiled[sm_scale] = torch.compile(DecodeModule(self.impl, sm_scale), fullgraph=True)
        module = self._compiled[sm_scale]
        args = {k: kw.get(k) for k in ("q", "cache", "indices", "attn_sink", "topk_length", "extra_cache",
                                        "extra_indices", "extra_topk_length")}
        module(**args)  # compiles (first shape) outside the timed region
        return lambda: module(**args)


class ProbeProvider:
    """A registered probe (the gather floor): the decode's bytes and indices, no output to check.

    Its split plan is the default one (16-token granule, two waves), as every published floor row used; the
    Gluon rungs plan whole 64-token tiles and one or two waves, so the floor's grid is not theirs.
    ``tokens_per_program`` (scripts/floor_patterns.py) replaces that plan by programs of exactly that many tokens."""

    is_probe = True

    def __init__(self, name: str, tokens_per_program: int | None = None):
        from .. import registry
        self.name, self.spec, self.tokens_per_program = name, registry.get(name), tokens_per_program
        if not torch.cuda.is_available():
            raise Skip("no CUDA GPU")

    def grid(self, plan, topk: int) -> tuple[int, int]:
        """(programs a query, tokens a program) for one scope of ``topk`` indices: the decode's plan, or
        ``tokens_per_program`` tokens each."""
        if self.tokens_per_program:
            return -(-topk // self.tokens_per_program), self.tokens_per_program
        return plan.num_splits, plan.tokens_per_split

    def prepare(self, kw: dict, config=None):
        from ..decode import decode_scopes, sm_count, split_plans
        q = kw["q"]
        b, s_q, h, _ = q.shape
        scopes = decode_scopes(kw["cache"], kw["indices"], None, kw.get("extra_cache"), kw.get("extra_indices"))
        plans = split_plans(queries=b * s_q, heads=h, indices=[ix for _, ix, _ in scopes], num_sms=sm_count(q.device))
        grids = [self.grid(p, ix.shape[-1]) for (_, ix, _), p in zip(scopes, plans)]
        sinks = [torch.empty(b * s_q, n, dtype=torch.int32, device=q.device) for n, _ in grids]

        configs = [self.config_for(tps, config) for _, tps in grids]
        # what the row records (tuned_columns): the config every scope ran on one grid, else MIXED
        one = all((tps, cfg) == (grids[0][1], configs[0]) for (_, tps), cfg in zip(grids, configs))
        self.ran = configs[0] if one else MIXED

        def run():
            for (c, ix, _), (n, tps), sink, cfg in zip(scopes, grids, sinks, configs):
                self.spec.launch(cache=c, indices=ix, num_splits=n, tokens_per_split=tps, sink=sink, config=cfg)
            return sinks
        return run

    def config_for(self, tokens_per_program: int, config):
        """The config a scope launches with: the caller's (None: autotuned)."""
        return config


# The gather floor on a finer grid than the decode's (issue 25: "floor" is what the hardware can gather, not what one
# plan gets): provider -> the registered probe it launches with at most FINE_SPLIT_TOKENS tokens a program. At b64
# h16 topk2048 the decode's plan gives "gather" 256 programs of 512 tokens, each with one tile of synchronous loads
# in flight and an index round trip between tiles; 64 tokens a program gives 2048 programs, many in flight a SM
# (scripts/floor_patterns.py on the H200: 23.5 us against 32.5 on random indices; data/explore/).
# The rows do not record the tokens a program and the kernel hash does not cover this module: a new grid is a new
# provider name, never a new value here (figures.PROVIDER_LABELS says "64 tokens a program"; a test pins both).
FINE_PROBES = {"gather_fine": "gather"}
FINE_SPLIT_TOKENS = 64


def fine_grid(topk: int, tokens_per_split: int, most: int = FINE_SPLIT_TOKENS) -> tuple[int, int]:
    """(programs a query, tokens a program): the decode's tokens a program, at most ``most``, over ``topk``."""
    tps = min(tokens_per_split, most)
    return -(-topk // tps), tps


class FineProbeProvider(ProbeProvider):
    """A FINE_PROBES provider: its probe's bytes and sink, at most FINE_SPLIT_TOKENS tokens a program, in a pinned
    config (:func:`fine_config`) unless one is forced."""

    def __init__(self, name: str):
        super().__init__(FINE_PROBES[name])

    def grid(self, plan, topk: int) -> tuple[int, int]:
        return fine_grid(topk, plan.tokens_per_split, FINE_SPLIT_TOKENS)

    def config_for(self, tokens_per_program: int, config):
        return fine_config(tokens_per_program) if config is None else config


def fine_config(tokens_per_program: int) -> dict:
    """gather_fine's config, pinned: its autotuner (a short warm-L2 benchmark) took 64-token tiles in one call (26.0
    us at b64 h16 topk2048, the headline at dcff189) and 16-token tiles in another (23.5), while every config
    forced on the same grid put 32-token tiles of 8 warps first at b64 h16 and h128 (22.2 us; 16 x 4 warps 22.5, 64 x
    8 warps 25.5: data/explore/explore_h200_20261204-1711_floor_configs.csv). Programs of 16 tokens (b1 h64 topk512)
    take 16-token tiles. The loads are synchronous at every num_stages (the kernel casts its pointer), so 1."""
    return dict(BLOCK_T=32 if tokens_per_program >= 32 else 16, num_warps=8, num_stages=1)


class IsolationProvider:
    """A bench provider for ``<decode>~<variant>``: timed like a decode, never checked (see the module doc)."""

    is_probe = True

    def __init__(self, impl: str, variant: str):
        if variant not in isolate.VARIANTS:
            raise ValueError(f"variant: expected one of {tuple(isolate.VARIANTS)}, got {variant!r}")
        self.impl, self.variant, self.name = impl, variant, f"{impl}{isolate.SEPARATOR}{variant}"
        if not torch.cuda.is_available():
            raise Skip("no CUDA GPU: the Gluon rungs run only on sm_90")

    def prepare(self, kw: dict, config=None):
        try:
            return isolate.isolated_launches(kw, impl=self.impl, variant=self.variant, config=config)
        except ValueError as e:
            if "no LEAVE_OUT switch" in str(e):
                raise Skip(str(e)) from e
            raise


LAUNCH_FLOORS = {"launch_floor": 1, "launch_floor2": 2}  # provider: empty launches per call


@triton.jit
def _empty_kernel(ptr):  # one pointer argument, as a decode's launches take many: no loads, no stores
    pass


class LaunchFloorProvider:
    """The host's floor for a call of one or two kernel launches: an empty kernel launched through the plan's own
    replay (compiled once, then straight into Triton's C launcher, ``DecodePlan._run``), with no input checks, no
    allocation and no work on the GPU. Its overhead rows (eager_idle minus graph) are what one launch, or a
    partial and a combine, cost on this host before any decode code runs: the part of a decode's overhead no host
    code can remove while it launches that many kernels."""

    is_probe = True

    def __init__(self, name: str):
        if not torch.cuda.is_available():
            raise Skip("no CUDA GPU: a launch floor is a GPU launch")
        self.name, self.launches = name, LAUNCH_FLOORS[name]
        self._launchers = None

    def prepare(self, kw: dict, config=None):
        from ..plan import DecodePlan, _launcher, compile_launch, compiled_launch
        q = kw["q"]
        if self._launchers is None:
            args = dict(ptr=q)
            compiled = compile_launch(_empty_kernel, (1, 1, 1), args)
            one = _launcher(compiled_launch(compiled, _empty_kernel, (1, 1, 1), args, ()))
            self._launchers = (one,) * self.launches
        launchers, ptrs, index = self._launchers, [], q.device.index
        stream = torch._C._cuda_getCurrentRawStream  # what a plan asks for its stream, per call

        def run():
            DecodePlan._run(launchers, ptrs, stream(index))
        return run


SINK = "+sink"  # suffix of a provider whose every call also takes an attention sink (InputPool.inputs(sink=True))


class SinkProvider:
    """Another provider's decode with an attention sink in every call ([heads] fp32, standard normal, fixed per shape:
    :meth:`workbench.bench.sweeps.InputPool.inputs`), as DeepSeek-V4's engines pass one. Its own provider because a
    sink changes what runs: a one-split call of rung 15 reads it in its partial kernel and builds with more producer
    registers there (wgmma_ws_h64.producer_regs); without them auto took 108 us against 86 at b64 h128 topk2048 on
    the H100 (data/explore/explore_h100_20261206-2047_sink_auto.csv), which no sink-less sweep could show. The check
    before timing compares with the reference on the same inputs, sink included (bench_one asks the pool for them)."""

    sink = True

    def __init__(self, inner: str):
        from .. import registry
        if inner.endswith(SINK) or inner in (*LAUNCH_FLOORS, *FINE_PROBES, *registry.names("probe")):
            raise ValueError(f"provider: {inner + SINK!r}: a sink is an input of a decode; {inner!r} takes none")
        self.inner = make_provider(inner)
        self.name = self.inner.name + SINK

    def __getattr__(self, attr):  # is_probe (an isolation variant skips the reference check), spec, ran: the inner's
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def prepare(self, kw: dict, config=None):
        if kw.get("attn_sink") is None:
            raise ValueError(f"{self.name}: its inputs carry no attn_sink (InputPool.inputs(shape, sink=True) makes "
                             f"them), so it would time and check the sink-less decode under its name")
        return self.inner.prepare(kw, config)


def provider_names() -> tuple[str, ...]:
    """Every provider the bench knows: the registered kernels (decodes and probes), the probes on a finer grid
    (FINE_PROBES: "gather_fine"), FlashMLA, and the default
    decode through a plan ("auto+plan"; make_provider takes any decode name with "+plan") or with its combine's
    launch forced ("auto+pdl", "auto+serial"; also any decode that asks for PDL), the default decode with one
    stage left out ("auto~no_loads", ...: workbench.bench.isolate; also any Gluon rung), and the default and
    FlashMLA with an attention sink ("auto+sink", "flashmla+sink"; SinkProvider takes any decode provider)."""
    from .. import registry
    return (registry.names() + tuple(FINE_PROBES)
            + ("flashmla", AUTO_PORTABLE, "auto" + PLAN, "auto" + COMPILED, *LAUNCH_FLOORS)
            + tuple("auto" + s for s in COMBINE_LAUNCH) + isolate.provider_names("auto") + ("auto" + SINK,
                                                                                            "flashmla" + SINK))


def make_provider(name: str):
    """A provider object, or raise Skip with the reason it cannot run here."""
    from .. import registry
    if name.endswith(SINK):
        return SinkProvider(name[: -len(SINK)])
    if name == "flashmla":
        return FlashMLAProvider()
    if name in registry.names("probe"):
        return ProbeProvider(name)
    if name in FINE_PROBES:
        return FineProbeProvider(name)
    if name in LAUNCH_FLOORS:
        return LaunchFloorProvider(name)
    if name == AUTO_PORTABLE:
        return AutoPortableProvider()
    if name in registry.decode_impls():
        return WorkbenchProvider(name)
    if name.endswith(PLAN) and name[: -len(PLAN)] in registry.decode_impls():
        return PlanProvider(name[: -len(PLAN)])
    if name.endswith(COMPILED) and name[: -len(COMPILED)] in registry.decode_impls():
        return CompiledOpProvider(name[: -len(COMPILED)])
    for suffix in COMBINE_LAUNCH:
        if name.endswith(suffix) and name[: -len(suffix)] in registry.decode_impls():
            return CombineLaunchProvider(name[: -len(suffix)], suffix)
    parts = isolate.split_provider(name)
    if parts and parts[0] in registry.decode_impls():
        return IsolationProvider(*parts)
    raise ValueError(f"provider: expected one of {provider_names()}, got {name!r}")


def base_impl(provider: str) -> str:
    """The decode a provider name runs, without its "+sink" suffix (always the last: make_provider refuses another
    after it), its "+plan", "+compiled", "+pdl" or "+serial" suffix (one: they do not stack) or its isolation
    variant ("~no_loads", ...)."""
    provider = provider.removesuffix(SINK).split(isolate.SEPARATOR, 1)[0]
    for suffix in (PLAN, COMPILED, *COMBINE_LAUNCH):
        if provider.endswith(suffix):
            return provider[: -len(suffix)]
    return provider


def kernel_of(provider: str, shape) -> str:
    """The kernel a provider runs on this shape (a :class:`workbench.bench.sweeps.BenchShape`) here: "auto" is
    recorded as what it resolved to (with or without a plan)."""
    provider = base_impl(provider)
    if provider == AUTO_PORTABLE:
        return portable_impl(heads=shape.heads, tokens=shape.batch * shape.s_q * (shape.topk + shape.extra_topk),
                             queries=shape.batch * shape.s_q)
    if provider != "auto":
        return provider
    from .. import registry
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return registry.resolve("auto", device, heads=shape.heads,
                            tokens=shape.batch * shape.s_q * (shape.topk + shape.extra_topk),
                            queries=shape.batch * shape.s_q, scopes=2 if shape.extra_topk else 1)


MIXED = object()  # ProbeProvider.ran when a call's scopes ran different grids or configs


def tuned_columns(provider) -> dict:
    """The config a probe provider ran its last call in, as the flat config columns: the one it pinned
    (gather_fine), else the one its kernel's autotuner took; {} when neither is known, or when the call's scopes ran
    different grids (a production shape's 128- and 512-token scopes: each its own config or autotuner key). 'config'
    stays '', which marks a config the caller forced. Recorded because the autotuner's picks vary from call to
    call: gather_fine at b64 h16 topk2048 took 23.5 us in one call and 26.0 in another (data/explore/README.md)."""
    spec, ran = getattr(provider, "spec", None), getattr(provider, "ran", None)
    if spec is None or spec.config_cls is None or ran is MIXED:
        return {}  # not a probe, or scopes of different grids (each its own config or autotuner key): no one config
    if ran is not None:
        return spec.config_cls.from_any(ran, spec.allowed, spec.name).columns()
    best = getattr(spec.jit, "best_config", None)
    return {} if best is None else spec.config_cls.from_triton(best).columns()


def config_columns(provider: str, config) -> dict:
    """The forced config as a short label and flat columns ('' and nothing else when autotuned)."""
    if config is None:
        return dict(config="")
    from .. import registry
    typed = registry.get(base_impl(provider)).check_config(config)
    return dict(config=typed.label, **typed.columns())
