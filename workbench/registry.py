"""One registry of kernels: each is declared once, as a spec, and found by the rest of the package.

``decode`` dispatches ``impl=`` through it, the bench builds its providers from it, the CLI
takes its choices from it, and the ladder notebook reads the rungs' predictions from it.
A new variant costs one module and one ``register(KernelSpec(...))``.

Kinds:
- ``split``: a partial kernel per KV scope into fp32 split scratch, merged by the combine kernel
  (``launch`` takes the partial-launch keywords of :func:`workbench.kernels.common.split_args`);
- ``fused``: one launch writes out and lse (``launch`` takes the whole call);
- ``reference``: torch, no kernel;
- ``probe``: not a decode; the bench times it beside the decodes (the gather floor).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

KINDS = ("split", "fused", "reference", "probe")


@dataclass(frozen=True)
class KernelSpec:
    name: str
    kind: str
    summary: str
    launch: Callable | None = None          # see the module docstring for each kind's keywords
    jit: object = None                      # the @triton.autotune / @triton.jit object (None for the reference)
    config_cls: type | None = None          # the typed config of its family
    allowed: dict = field(default_factory=dict)  # config key -> permitted values
    config_space: tuple = ()                # every typed config the lab compiles
    fixed_meta: dict = field(default_factory=dict)  # constexpr switches this entry pins (a ladder rung)
    shared_model: Callable | None = None    # typed config -> estimated shared bytes
    lab_signature: dict = field(default_factory=dict)  # runtime argument -> Triton type, for the lab
    lab_constexprs: Callable | None = None  # typed config -> every constexpr of a compile
    compile_options: dict = field(default_factory=dict)  # extra compile options the launcher passes, e.g.
    # {"maxnreg": 128} for wgmma_f16_2cta (its launcher passes maxnreg=128): the lab passes them to triton.compile too
    check_configs: tuple = ()               # configs (dicts) the GPU checks cycle through; the first is "fixed"
    split_waves: int = 2                    # split kinds: programs per SM the split plan aims for
    split_granule: int = 16                 # split kinds: tokens per split are a multiple of this
    interpretable: bool = True              # False: GPU only (Gluon); CPU tests skip it, the GPU checks cover it
    pdl: bool = False                       # split kinds: the combine is a programmatic dependent launch (sm_90)
    rung: int | None = None                 # position on the optimisation ladder (None: not a rung)
    prediction: str = ""                    # written before it was measured: what should move

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")

    def check_config(self, config):
        """A user's config as this kernel's typed config; TypeError/ValueError name the problem."""
        if self.config_cls is None:
            raise ValueError(f"config: the {self.name} implementation takes no kernel config")
        return self.config_cls.from_any(config, self.allowed, self.name)


REGISTRY: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in REGISTRY and REGISTRY[spec.name] is not spec:
        raise ValueError(f"a kernel named {spec.name!r} is registered already")
    REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def get(name: str) -> KernelSpec:
    _load_builtin()
    if name not in REGISTRY:
        raise ValueError(f"impl: expected one of {decode_impls()} or a probe {names('probe')}, got {name!r}")
    return REGISTRY[name]


def names(*kinds: str) -> tuple[str, ...]:
    """Registered names, in registration order; only of the given kinds when any are named."""
    _load_builtin()
    return tuple(n for n, s in REGISTRY.items() if not kinds or s.kind in kinds)


AUTO = "auto"


def decode_impls() -> tuple[str, ...]:
    """What ``sparse_mla_decode(impl=...)`` takes: "auto" and every registered decode."""
    return (AUTO,) + names("split", "fused", "reference")


# The two-blocks-per-SM build (16-head groups, wgmma_f16_2cta) wins at 17-64 heads on calls too small to fill the
# GPU with 64-head groups; the warp-specialised wgmma_ws at <= 16 heads on the biggest calls (auto_kernel's
# docstring has the measurements, data/*_crossover.csv and *_ladder.csv)
TWO_BLOCK_MAX_TOKENS_H64 = 4096    # h64: b1-b8 topk512 and b1-b2 topk2048 win, 8192 tokens lose (crossover 0430)
# h16: b32 topk2048 (65536 tokens) and up; below, wgmma_f16 (b16 topk2048, 32768 tokens: 1.3% off in 2341; the
# production shape, 40960 tokens on two scopes: 28.4 vs 29.6 us in the 2340 ladder)
WS_MIN_TOKENS_H16 = 65536


def auto_kernel(capability: str, *, heads: int, tokens: int) -> str:
    """What "auto" runs on a GPU of ``capability`` ("sm_90", ...) for a call of this size (a pure rule).

    On sm_90, an f16 Gluon rung: "wgmma_f16" (rung 11), except where the two-blocks-per-SM build
    "wgmma_f16_2cta" (rung 12) wins: at 17-64 heads on calls of at most 4096 selected tokens, where 64-head
    groups leave most SMs idle (crossover sweep, data/bench_h200_20261201-0430_crossover.csv: b1 h64 topk512
    9.2 vs 13.0 us; b4 h64 topk2048, 8192 tokens, 25.7 vs 21.4); and at <= 16 heads from 65536 tokens up the
    warp-specialised "wgmma_ws" (rung 13; before it, rung 12 above 65536 tokens: ladder 0708, b64 h16 topk2048
    53.06 vs 55.03 us for rung 11): ladder 2340, b64 h16 topk2048, 51.6 us vs 52.9 for rung 12 and 55.1 for
    rung 11; crossover 2341, b32 h16 topk2048, 30.72 vs 31.60 for rung 11 (no calls between 65536 and 131072
    tokens were timed). In the 2341 crossover (24 shapes, rungs 2, 7, 8, 10, 11, 12 and 13) the rule's pick is
    within 2% of the fastest at every shape but b32 h16 topk2048, where the rule of that run (wgmma_ws above
    65536 tokens only) was 2.9% off; this rule picks wgmma_ws there. Earlier crossovers, before rung 13, over
    tile512, rungs 7 and 8 (removed since: data/rungs.csv), wgmma_xchg, wgmma_f16 and wgmma_f16_2cta: the pick
    within 2% at all 24 shapes in 0430 and 0448, at all but one in 0647 (b4 h16 topk2048: 13.8 vs 13.5 us for wgmma_f16_2cta, 2.6%) and in
    0709 (b1 h16 topk512: 8.8 vs 8.5 us for wgmma_xchg, 4.1%), and with the combine as a programmatic dependent
    launch (decode.combine_pdl) at all 24 in 1103 (at most 1.6%). The f16 rungs are exact on every cache: a split
    with a scale byte outside 105..127 or a rope of 512 or more runs again with bf16 operands
    (gluon_common.F16_MIN_SCALE_BYTE).
    Any other GPU: the portable "tile512".
    ``tokens`` is the call's selected tokens in all: b * s_q * (topk + extra topk).
    """
    if capability != "sm_90":
        return "tile512"
    if 16 < heads <= 64 and tokens <= TWO_BLOCK_MAX_TOKENS_H64:
        return "wgmma_f16_2cta"
    if heads <= 16 and tokens >= WS_MIN_TOKENS_H16:
        return "wgmma_ws"
    return "wgmma_f16"


def resolve(impl: str, device, *, heads: int, tokens: int) -> str:
    """The kernel "auto" stands for on ``device``: :func:`auto_kernel` for its GPU; "tile512" on the CPU or
    under the interpreter. A named kernel is returned unchanged."""
    if impl != AUTO:
        return impl
    import torch

    from .kernels.common import INTERPRET
    dev = torch.device(device)
    if dev.type != "cuda" or INTERPRET:
        return "tile512"
    major, minor = torch.cuda.get_device_capability(dev)
    return auto_kernel(f"sm_{major}{minor}", heads=heads, tokens=tokens)


def compiled_kernels() -> tuple[str, ...]:
    """Kernels the resource lab can compile: those with a lab signature."""
    return tuple(n for n in names() if REGISTRY[n].lab_signature)


def rungs() -> list[KernelSpec]:
    """The registered rungs of the optimisation ladder, by rung number (the removed ones: data/rungs.csv)."""
    return sorted((s for s in (REGISTRY[n] for n in names()) if s.rung is not None), key=lambda s: s.rung)


_LOADED = []


def _load_builtin():
    if not _LOADED:
        _LOADED.append(True)
        from .kernels import catalog  # noqa: F401  (registers the built-in kernels)
