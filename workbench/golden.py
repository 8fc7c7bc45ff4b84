"""Loading FlashMLA's golden cases (../shared/golden/ beside the checkout, or $WORKBENCH_GOLDEN)."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from .cache import quantize_kv

ROOT = Path(__file__).resolve().parents[1]


def golden_dir() -> Path:
    env = os.environ.get("WORKBENCH_GOLDEN")
    candidates = [Path(env)] if env else [ROOT.parent / "shared" / "golden", ROOT / "shared" / "golden",
                                          ROOT / ".golden"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.pt")):
            return c
    raise FileNotFoundError(f"golden cases not found; looked in {[str(c) for c in candidates]} "
                            "(set WORKBENCH_GOLDEN to the folder of *.pt files)")


def golden_names() -> list[str]:
    return sorted(p.stem for p in golden_dir().glob("*.pt"))


def load_golden(name: str) -> dict:
    return torch.load(golden_dir() / f"{name}.pt", weights_only=False)


def golden_kwargs(g: dict, device="cpu", heads: slice | None = None) -> dict:
    """Decode keyword arguments for a golden case (caches rebuilt with quantize_kv), optionally a head subset."""
    hs = heads or slice(None)
    kw = dict(q=g["q"][:, :, hs].contiguous().to(device), cache=quantize_kv(g["kv_bf16"].to(device)),
              indices=g["indices"].to(device), sm_scale=g["sm_scale"],
              attn_sink=None if g["attn_sink"] is None else g["attn_sink"][hs].contiguous().to(device),
              topk_length=None if g["topk_length"] is None else g["topk_length"].to(device))
    if "extra_kv_bf16" in g:
        kw.update(extra_cache=quantize_kv(g["extra_kv_bf16"].to(device)),
                  extra_indices=g["extra_indices"].to(device),
                  extra_topk_length=None if g["extra_topk_length"] is None else g["extra_topk_length"].to(device))
    return kw


def golden_expected(g: dict, heads: slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's (out fp32, lse) for the case, optionally a head subset."""
    hs = heads or slice(None)
    return g["flashmla_out"][:, :, hs].float(), g["flashmla_lse"][:, hs]
