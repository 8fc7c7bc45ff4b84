"""Tuning state the autotuners' prune hooks share (host side; no kernel reads it).

The target pruning budgets for (and the resource lab's override of it), the record of every pruning
decision (``workbench.pruned_configs`` reads it), and the arguments a prune hook is pruning for. The
device helpers and launch arguments every kernel shares are in :mod:`workbench.kernels.common`.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch
import triton

from ..lab.targets import GpuTarget, get_target, target_for_capability
from . import common

class _Overrides(threading.local):
    """Per thread, the stack of active :class:`target_override` targets: the lab compiling for sm_120 in one
    thread never changes what a decode in another thread prunes for."""

    def __init__(self):
        self.stack: list[GpuTarget] = []


_TARGET_OVERRIDE = _Overrides()


def current_target() -> GpuTarget:
    """The target pruning budgets for: this thread's active override, else the current GPU, else sm_90."""
    if _TARGET_OVERRIDE.stack:
        return _TARGET_OVERRIDE.stack[-1]
    if torch.cuda.is_available() and not common.INTERPRET:  # read at call time: tests switch it off
        return target_for_capability(*torch.cuda.get_device_capability())
    return get_target(os.environ.get("WORKBENCH_TARGET", "sm_90"))


class target_override:
    """Context manager: budget pruning for another target (the resource lab uses it)."""

    def __init__(self, arch: str):
        self.target = get_target(arch)

    def __enter__(self):
        _TARGET_OVERRIDE.stack.append(self.target)
        return self.target

    def __exit__(self, *exc):
        _TARGET_OVERRIDE.stack.pop()


@dataclass(frozen=True)
class PruneDecision:
    kernel: str
    arch: str
    config: dict
    kept: bool
    estimated_shared_bytes: int
    limit_bytes: int
    reason: str


PRUNE_RECORD: list[PruneDecision] = []


def config_dict(cfg: triton.Config) -> dict:
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def record_prune(kernel: str, target: GpuTarget, cfg: triton.Config, est: int, reason: str | None) -> bool:
    d = PruneDecision(kernel, target.arch, config_dict(cfg), reason is None, est, target.smem_per_block,
                      reason or "fits")
    if d not in PRUNE_RECORD:
        PRUNE_RECORD.append(d)
    return reason is None


def call_args(named_args: dict, kwargs: dict) -> dict:
    """Every argument of the launch a prune hook is pruning for.

    Triton 3.6 hands ``early_config_prune`` only the positional arguments as ``named_args``
    (``Autotuner.nargs = dict(zip(arg_names, args))``); the launchers pass keywords, which
    arrive as ``**kwargs``. Reading only ``named_args`` saw no head count at all.
    """
    return {**named_args, **kwargs}
