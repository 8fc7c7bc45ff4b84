"""Typed kernel configs: one frozen dataclass per kernel family.

A config is validated once, prints as a short label, and maps to flat table columns, so no
table or notebook ever holds a stringified dict. ``from_any`` accepts what users write (a
dict, a ``triton.Config`` or the dataclass itself) and names the bad key or value.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import ClassVar

import triton

LAUNCH_KEYS = ("num_warps", "num_stages")  # Triton launch options, not constexprs


@dataclass(frozen=True)
class KernelConfig:
    REQUIRED: ClassVar[tuple] = ()  # keys a user must give; the rest have defaults
    num_warps: int = 4
    num_stages: int = 1

    def columns(self) -> dict:
        """Flat columns for a results row; switches a kernel does not have (None) are left out."""
        d = {k: v for k, v in asdict(self).items() if v is not None}
        return {**{k: v for k, v in d.items() if k not in LAUNCH_KEYS}, **{k: d[k] for k in LAUNCH_KEYS}}

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.columns().items())

    def meta(self) -> dict:
        """The constexpr keyword arguments of a launch."""
        return {k: v for k, v in self.columns().items() if k not in LAUNCH_KEYS}

    def to_triton(self) -> triton.Config:
        return triton.Config(self.meta(), num_warps=self.num_warps, num_stages=self.num_stages)

    @classmethod
    def from_triton(cls, cfg: triton.Config):
        return cls(**cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    @classmethod
    def from_any(cls, config, allowed: dict, kernel: str):
        """Validate a user's config against ``allowed`` (key -> permitted values); ValueError names the problem."""
        if isinstance(config, KernelConfig):
            config = config.columns()
        elif isinstance(config, triton.Config):
            config = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
        if not isinstance(config, dict):
            raise TypeError(f"config: expected a dict, triton.Config or {cls.__name__}, got {type(config).__name__}")
        unknown = set(config) - set(allowed)
        if unknown:
            raise ValueError(f"config: unknown keys {sorted(unknown)} for the {kernel} kernel; "
                             f"expected {sorted(allowed)}")
        missing = [k for k in cls.REQUIRED if k in allowed and k not in config]
        if missing:
            raise ValueError(f"config: missing {sorted(missing)} for the {kernel} kernel")
        for k, v in config.items():
            if v not in allowed[k]:
                raise ValueError(f"config: {k}={v!r} is not supported by the {kernel} kernel; "
                                 f"expected one of {list(allowed[k])}")
        return cls(**config)


@dataclass(frozen=True)
class TiledConfig(KernelConfig):
    """Head-batched tiled kernels (mma and its ladder rungs): BLOCK_H heads x BLOCK_T tokens per step."""

    REQUIRED: ClassVar[tuple] = ("BLOCK_H", "BLOCK_T")
    BLOCK_H: int = 0
    BLOCK_T: int = 0
    PREFETCH: int | None = None  # the seed kernel's hand prefetch; None for kernels without it

    def __post_init__(self):
        if self.BLOCK_H <= 0 or self.BLOCK_T <= 0:
            raise ValueError(f"config: BLOCK_H and BLOCK_T must be set, got {self}")


@dataclass(frozen=True)
class SimtConfig(KernelConfig):
    """The per-head SIMT baseline: BLOCK_T tokens of one head per step."""

    REQUIRED: ClassVar[tuple] = ("BLOCK_T",)
    BLOCK_T: int = 0

    def __post_init__(self):
        if self.BLOCK_T <= 0:
            raise ValueError(f"config: BLOCK_T must be set, got {self}")


def tiled_space(allowed: dict) -> list[TiledConfig]:
    """Every combination of the allowed values."""
    keys = [k for k in ("BLOCK_H", "BLOCK_T", "num_warps", "num_stages", "PREFETCH") if k in allowed]
    return [TiledConfig(**dict(zip(keys, vals))) for vals in itertools.product(*(allowed[k] for k in keys))]
