"""What a registered kernel is (``KernelSpec``) and the table that holds them (``REGISTRY``, ``register``).

The kernel catalogue (``kernels/catalog.py``) declares the built-in kernels here; ``workbench.registry``
loads it and answers the questions about them (names, kinds, what "auto" runs). Apart so that the catalogue
and the registry do not import each other.
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
    split_block_h: int | None = None        # split kinds: the heads a program holds, as the split plan counts its
    # programs (None: decode.NOMINAL_BLOCK_H, 64, whatever the config)
    interpretable: bool = True              # False: GPU only (Gluon); CPU tests skip it, the GPU checks cover it
    pdl: bool = False                       # split kinds: the combine is a programmatic dependent launch (sm_90)
    direct: bool = False                    # split kinds: a call of one split in all runs no combine: its launch
    # takes direct=True, the call's out and lse as part_out and part_lse, and attn_sink, and writes what the combine
    # would have (the Gluon rungs: gluon_common.epilogue_args)
    two_scopes: bool = False                # split kinds: a call with an extra scope runs one partial launch over both
    # (its launch takes extra_cache, extra_indices, extra_topk_length, extra_num_splits, extra_tokens_per_split; the
    # extra scope's splits follow the first's), not one launch per scope
    joined_scopes: bool = False             # split kinds: a call with an extra scope runs one partial launch whose
    # splits cover each query's two index rows as one (its launch takes extra_cache, extra_indices, extra_topk_length;
    # one split plan over topk + extra topk, so a call of one split in all runs no combine)
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
