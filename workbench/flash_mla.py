"""A drop-in for FlashMLA's sparse decode API (DeepSeek-V4 "MODEL1" FP8 cache): swap one import.

An engine that calls FlashMLA's sparse decode::

    from flash_mla import get_mla_metadata, flash_mla_with_kvcache

runs the workbench's kernels instead with::

    from workbench.flash_mla import get_mla_metadata, flash_mla_with_kvcache

and no other change: the same argument names and positions, the same results (shapes, dtypes, memory layout,
the LSE convention). The API is FlashMLA's since its 2026-01 interface (deepseek-ai/FlashMLA
``flash_mla/flash_mla_interface.py``, and PyPI ``sgl-flash-mla==1.0.0``, whose ``use_legacy=True`` path is the
SM90 MODEL1 kernel the golden cases come from): ``get_mla_metadata()`` returns ``(FlashMLASchedMeta(), None)``
and ``flash_mla_with_kvcache`` takes that pair back as ``tile_scheduler_metadata, num_splits``.

Only sparse decode over the MODEL1 cache is offered. FlashMLA's other modes raise ``NotImplementedError`` naming
the argument: dense decode (``indices=None``), ``causal=True``, ``is_fp8_kvcache=False``, ``head_dim_v != 512``,
other cache formats (``k_cache`` of 656 bytes a token: V3.2; 528 or 288: V4.1), and sgl-flash-mla's
``enable_batch_invariant=True``, ``kv_format``, ``descale_q``/``descale_k``. Bad shapes and dtypes raise the
workbench's ``ValueError``/``TypeError``, with the message naming FlashMLA's argument (``k_cache``, not
``cache``).

Under ``torch.compile`` the call goes through ``torch.ops.workbench.sparse_mla_decode`` (:mod:`workbench.ops`), so
it is traced without a graph break; eagerly it calls :func:`workbench.sparse_mla_decode` directly (no operator
dispatch on the way).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

import torch

from .decode import sparse_mla_decode
from .format.layout import MODEL1

# FlashMLA's cache formats other than MODEL1, by bytes per token (k_cache.shape[-1])
OTHER_FORMATS = {656: "DeepSeek-V3.2's (656 bytes a token)", 528: "DeepSeek-V4.1's fp8 (528 bytes a token)",
                 288: "DeepSeek-V4.1's fp4 (288 bytes a token)"}
# workbench argument -> FlashMLA argument, for error messages
FLASHMLA_NAMES = {"cache": "k_cache", "extra_cache": "extra_k_cache", "extra_indices": "extra_indices_in_kvcache",
                  "sm_scale": "softmax_scale"}


@dataclasses.dataclass
class FlashMLASchedMeta:
    """What :func:`get_mla_metadata` returns, with FlashMLA's fields. The workbench plans its splits on every call
    (:func:`workbench.decode.plan_splits`), so it neither fills nor reads these: one instance may be shared by
    every layer and every batch shape (FlashMLA requires the same shapes on every reuse; this does not check)."""

    have_initialized: bool = False
    config: Any = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None
    num_splits: Optional[torch.Tensor] = None


def get_mla_metadata(*args, **kwargs) -> tuple[FlashMLASchedMeta, None]:
    """FlashMLA's ``get_mla_metadata``: ``(FlashMLASchedMeta(), None)``, whatever the arguments.

    FlashMLA's takes ``*args, **kwargs`` only to accept the older interface's
    ``(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q, is_fp8_kvcache, topk)``; so does this one.
    Pass the pair back to :func:`flash_mla_with_kvcache` as ``tile_scheduler_metadata, num_splits``.
    """
    return FlashMLASchedMeta(), None


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=None, indices=None,
                           attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None, enable_batch_invariant=False, use_legacy=False, kv_format=None,
                           descale_q=None, descale_k=None):
    """FlashMLA's ``flash_mla_with_kvcache``, sparse decode over the MODEL1 cache, on the workbench's kernels.

    Arguments, in FlashMLA's order, and what the workbench makes of each (:func:`workbench.sparse_mla_decode`):

    ======================== ====================================================================================
    FlashMLA                 workbench
    ======================== ====================================================================================
    q                        ``q``: [b, s_q, h, 512] bf16 (any head count, not only 64 or 128)
    k_cache                  ``cache``: [num_blocks, block_size, 1, 584] uint8 or float8_e4m3fn, page stride
                             stride(0) (DESIGN.md "The cache format")
    block_table              unused: sparse decode addresses the cache through ``indices`` (FlashMLA ignores it
                             too); any value, None included
    cache_seqlens            unused, likewise
    head_dim_v               must be 512 (else NotImplementedError)
    tile_scheduler_metadata  unused: anything, normally :func:`get_mla_metadata`'s first element
    num_splits               unused: anything, normally None (FlashMLA asserts None; the older interface passed a
                             tensor)
    softmax_scale            ``sm_scale`` (None: 512**-0.5, FlashMLA's ``q.shape[-1] ** -0.5``)
    causal                   must be False (FlashMLA's sparse decode asserts it too)
    is_fp8_kvcache           must be True or None (None: sgl-flash-mla's default, inferred True for sparse decode)
    indices                  ``indices``: [b, s_q, topk] int32, ``page*block_size + offset``; -1 is invalid (and
                             so, here, is any index outside the cache, where FlashMLA reads out of bounds). None
                             (dense decode) raises NotImplementedError
    attn_sink                ``attn_sink``: [h] fp32
    extra_k_cache            ``extra_cache``
    extra_indices_in_kvcache ``extra_indices``
    topk_length              ``topk_length``: [b] int32
    extra_topk_length        ``extra_topk_length``: [b] int32
    enable_batch_invariant   sgl-flash-mla only; must be False (the split plan depends on the batch size)
    use_legacy               sgl-flash-mla only; either value: the workbench reads the MODEL1 cache that its
                             legacy (SM90) kernel reads
    kv_format                sgl-flash-mla only; must be None
    descale_q, descale_k     sgl-flash-mla only (dense fp8 decode); must be None
    ======================== ====================================================================================

    Returns ``(out, softmax_lse)`` as FlashMLA does: out [b, s_q, h, 512] bf16; softmax_lse [b, h, s_q] fp32, the
    natural-log logsumexp of the scaled logits without the sink, +inf for a query with no valid token (out is 0
    there), laid out in memory as FlashMLA's is: the transpose of a contiguous [b, s_q, h] tensor (for s_q == 1
    the same bytes as a contiguous [b, h, 1]; for s_q > 1 one small copy). Both are new tensors on every call.
    """
    _check_supported(k_cache=k_cache, head_dim_v=head_dim_v, causal=causal, is_fp8_kvcache=is_fp8_kvcache,
                     indices=indices, enable_batch_invariant=enable_batch_invariant, kv_format=kv_format,
                     descale_q=descale_q, descale_k=descale_k)
    kw = dict(attn_sink=attn_sink, topk_length=topk_length, extra_cache=extra_k_cache,
              extra_indices=extra_indices_in_kvcache, extra_topk_length=extra_topk_length)
    if torch.compiler.is_compiling():
        sm_scale = None if softmax_scale is None else float(softmax_scale)
        out, lse = torch.ops.workbench.sparse_mla_decode(q, k_cache, indices, sm_scale=sm_scale, **kw)
    else:
        try:
            out, lse = sparse_mla_decode(q, k_cache, indices, sm_scale=softmax_scale, **kw)
        except (TypeError, ValueError) as e:
            if type(e) not in (TypeError, ValueError):
                raise
            raise type(e)(_flashmla_names(str(e))) from e  # the same error, under FlashMLA's argument names
    # FlashMLA allocates its lse as [b, s_q, h] and returns its transpose(1, 2)
    return out, lse.transpose(1, 2).contiguous().transpose(1, 2)


def _check_supported(*, k_cache, head_dim_v, causal, is_fp8_kvcache, indices, enable_batch_invariant, kv_format,
                     descale_q, descale_k) -> None:
    """NotImplementedError, naming the argument, for a FlashMLA feature the workbench does not offer."""
    def no(name, what):
        raise NotImplementedError(f"{name}: {what}; workbench.flash_mla offers FlashMLA's sparse decode over the "
                                  "DeepSeek-V4 MODEL1 FP8 cache only")
    if indices is None:
        no("indices", "None asks for dense decode, which is not supported (pass the sparse indices)")
    if causal:
        no("causal", "causal=True is not supported (sparse decode has no causal mask; FlashMLA refuses it too)")
    if is_fp8_kvcache is not None and not is_fp8_kvcache:
        no("is_fp8_kvcache", f"{is_fp8_kvcache!r}: a bf16 cache is not supported (pass True, or None)")
    if head_dim_v != MODEL1.d:
        no("head_dim_v", f"{head_dim_v!r} is not supported (only {MODEL1.d})")
    if isinstance(k_cache, torch.Tensor) and k_cache.dim() == 4 and k_cache.shape[-1] in OTHER_FORMATS:
        no("k_cache", f"{OTHER_FORMATS[k_cache.shape[-1]]} cache format is not supported "
                      f"(only MODEL1, {MODEL1.bytes_per_token} bytes a token)")
    if enable_batch_invariant:
        no("enable_batch_invariant", "True is not supported (the split plan depends on the batch size)")
    if kv_format is not None:
        no("kv_format", f"{kv_format!r} is not supported (only None: the MODEL1 format)")
    for name, t in (("descale_q", descale_q), ("descale_k", descale_k)):
        if t is not None:
            no(name, "descaling (dense fp8 decode) is not supported (only None)")


def _flashmla_names(message: str) -> str:
    """A workbench validation message with FlashMLA's argument names in the part before the first ': '."""
    head, sep, tail = message.partition(": ")
    if not sep:
        return message
    head = re.sub(r"\b(" + "|".join(FLASHMLA_NAMES) + r")\b", lambda m: FLASHMLA_NAMES[m.group(1)], head)
    return head + sep + tail


__all__ = ["FlashMLASchedMeta", "flash_mla_with_kvcache", "get_mla_metadata"]
