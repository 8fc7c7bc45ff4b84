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


# auto_kernel's thresholds, from the crossover sweeps (data/*_crossover.csv; the numbers: docs/decisions.md)
TWO_BLOCK_MAX_TOKENS_H64 = 4096    # h64: up to b8 topk512 and b2 topk2048 the 16-head groups win
WS_MIN_TOKENS_H16 = 65536


def auto_kernel(capability: str, *, heads: int, tokens: int) -> str:
    """What "auto" runs on a GPU of ``capability`` ("sm_90", ...) for a call of this size (a pure rule).

    On sm_90: "wgmma_f16_2cta" at 17-64 heads up to TWO_BLOCK_MAX_TOKENS_H64 selected tokens (64-head groups
    leave most SMs idle there), "wgmma_ws" at <= 16 heads from WS_MIN_TOKENS_H16 up, else "wgmma_f16"; any other
    GPU: the portable "tile512". Why: the crossover sweep picks within 2% of the fastest kept rung at its shapes
    (data/bench_h200_20261201-2341_crossover.csv; the history of the rule: docs/decisions.md). ``tokens`` is the
    call's selected tokens in all: b * s_q * (topk + extra topk).
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
