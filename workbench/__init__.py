"""Sparse MLA decode workbench for DeepSeek-V4 over a paged FP8 (MODEL1) KV cache.

Set TRITON_INTERPRET=1 before importing to run the Triton kernels on the CPU.
"""
import os as _os

import triton as _triton

# Tuned configs persist in Triton's cache (keyed by Triton version, target, kernel source and tuning key),
# so a second process does not re-tune and `warmup` fills it; must precede the kernels' decoration.
# WORKBENCH_AUTOTUNE_CACHE=0 turns it off.
_triton.knobs.autotuning.cache = _os.environ.get("WORKBENCH_AUTOTUNE_CACHE", "1") != "0"

from .accounting import DecodeCost, case_cost, count_valid_tokens, decode_cost
from .format.cases import DecodeCase, DecodeScope, build_case
from .format.codec import dequantize_kv, indices_to_positions, positions_to_indices, quantize_kv
from .decode import IMPLS, plan_splits, sparse_mla_decode, warmup
from .kernels.common import INTERPRET
from .kernels.tuning import PRUNE_RECORD
from .format.layout import MODEL1, CacheLayout
from .metrics import assert_close, compare
from .plan import DecodePlan, plan_decode
from .format.reference import sparse_mla_decode_reference
from . import ops  # noqa: F401  (registers torch.ops.workbench.sparse_mla_decode)


def pruned_configs(kernel: str | None = None) -> list[dict]:
    """Every pruning decision made so far (kept and pruned), with estimated bytes and the reason."""
    return [dict(kernel=d.kernel, arch=d.arch, **d.config, kept=d.kept,
                 estimated_shared_bytes=d.estimated_shared_bytes, limit_bytes=d.limit_bytes, reason=d.reason)
            for d in PRUNE_RECORD if kernel is None or d.kernel == kernel]


__all__ = ["MODEL1", "CacheLayout", "DecodeCase", "DecodeScope", "DecodeCost", "DecodePlan", "IMPLS", "INTERPRET",
           "assert_close", "build_case", "case_cost", "compare", "count_valid_tokens", "decode_cost",
           "dequantize_kv", "indices_to_positions", "plan_decode", "plan_splits", "positions_to_indices", "pruned_configs",
           "quantize_kv", "sparse_mla_decode", "sparse_mla_decode_reference", "warmup"]
