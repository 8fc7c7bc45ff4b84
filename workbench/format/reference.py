"""Exact fp32 reference for sparse MLA decode over MODEL1 paged caches.

Semantics (DESIGN.md): natural-log lse over the valid selected tokens of all
scopes; the sink scales out by 1/(1+exp(sink-lse)) and is left out of lse; a
query with no valid token gives out = 0 and lse = +inf. Any index outside
[0, num_blocks*block_size) is invalid and is never read.
"""
from __future__ import annotations

import torch

from .codec import gather_dequantized, valid_index_mask
from .layout import MODEL1
from ..validate import check_decode_args


def _gather_scope(cache, indices, topk_length):
    """Return (K [b, s_q, topk, d] fp32, valid [b, s_q, topk] bool) with invalid rows zeroed."""
    valid = valid_index_mask(indices, cache.shape[0] * cache.shape[1], topk_length)
    k = gather_dequantized(cache, torch.where(valid, indices.long(), 0)).float()  # only the selected rows
    # where, not multiply: NaN in a page nobody selects must not leak through
    k = torch.where(valid[..., None], k, torch.zeros((), dtype=k.dtype, device=k.device))
    return k, valid


def sparse_mla_decode_reference(q, cache, indices, *, sm_scale=None, attn_sink=None, topk_length=None,
                                extra_cache=None, extra_indices=None, extra_topk_length=None):
    """fp32 sparse MLA decode.

    q: [b, s_q, h, 512] bf16; cache: [num_blocks, block_size, 1, 584] uint8 view;
    indices: [b, s_q, topk] int32. Returns (out [b, s_q, h, 512] fp32, lse [b, h, s_q] fp32).
    """
    check_decode_args(q, cache, indices, sm_scale=sm_scale, attn_sink=attn_sink, topk_length=topk_length,
                      extra_cache=extra_cache, extra_indices=extra_indices, extra_topk_length=extra_topk_length)
    sm_scale = MODEL1.d ** -0.5 if sm_scale is None else float(sm_scale)
    k, valid = _gather_scope(cache, indices, topk_length)
    if extra_cache is not None:
        ek, evalid = _gather_scope(extra_cache, extra_indices, extra_topk_length)
        k, valid = torch.cat([k, ek], dim=2), torch.cat([valid, evalid], dim=2)
    qf = q.float()
    logits = torch.einsum("bshd,bstd->bsht", qf, k) * sm_scale
    logits = logits.masked_fill(~valid[:, :, None, :], float("-inf"))
    # normalised by the sum of exp(logit - max), not by exp(-lse): at logits of 1e28 and more an fp32 lse is the
    # max (log(sum) is below its ulp), which would give k ties each weight 1 instead of 1/k
    m = logits.amax(dim=-1)  # [b, s_q, h]; -inf where nothing is valid
    p = torch.exp(logits - torch.where(torch.isinf(m), 0.0, m)[..., None])
    l = p.sum(dim=-1)
    out = torch.einsum("bsht,bstd->bshd", p, k) / torch.where(l == 0, 1.0, l)[..., None]
    lse = m + torch.log(l)  # -inf where nothing is valid (log 0)
    if attn_sink is not None:
        gate = torch.sigmoid(lse - attn_sink.view(1, 1, -1))
        out = out * torch.where(torch.isneginf(lse), 0.0, gate)[..., None]  # sink=-inf, lse=-inf is NaN
    lse = torch.where(torch.isneginf(lse), float("inf"), lse)
    return out, lse.permute(0, 2, 1).contiguous()
