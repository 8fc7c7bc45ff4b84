"""The decode as a PyTorch operator: ``torch.ops.workbench.sparse_mla_decode``, for ``torch.compile``.

Importing :mod:`workbench` registers it. :func:`workbench.sparse_mla_decode` itself is Python around Triton and Gluon
launches (validation, autotuners, launch hooks), which Dynamo does not take in one graph (under the CPU interpreter,
torch 2.13, ``torch.compile(fullgraph=True)`` of a function calling it fails inside Triton's interpreter; not
measured on a GPU). Dynamo traces a call to this operator as one node, with no graph break, using the fake
implementation below for shapes, and runs the real decode when the graph runs::

    out, lse = torch.ops.workbench.sparse_mla_decode(q, cache, indices, sm_scale=None, attn_sink=None,
                                                     topk_length=None, extra_cache=None, extra_indices=None,
                                                     extra_topk_length=None, impl="auto")

Arguments and results are :func:`workbench.decode.sparse_mla_decode`'s (out [b, s_q, h, 512] bf16, lse [b, h, s_q]
fp32, both contiguous and newly allocated on every call), except that ``sm_scale`` is a float or None (not a
0-dim tensor), there is no ``config`` and no ``plan`` (a plan returns its own buffers on every call, which an
operator must not; capture the compiled graph in a CUDA graph instead). Validation happens when the real decode
runs, so a bad argument raises when the graph runs, not while it is traced (the fake checks only ``q``).

No gradients: the decode has no backward. The operator keeps ``torch.library.custom_op``'s autograd
registration, so a forward with inputs that require grad works, and ``backward`` through its outputs raises
RuntimeError ("no autograd formula was registered").
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch

from . import decode
from .format.codec import copy_cache
from .format.layout import MODEL1
from .validate import check_cache, check_tensor

OP_NAME = "workbench::sparse_mla_decode"


@torch.library.custom_op(OP_NAME, mutates_args=())
def sparse_mla_decode_op(q: torch.Tensor, cache: torch.Tensor, indices: torch.Tensor,
                         sm_scale: Optional[float] = None, attn_sink: Optional[torch.Tensor] = None,
                         topk_length: Optional[torch.Tensor] = None, extra_cache: Optional[torch.Tensor] = None,
                         extra_indices: Optional[torch.Tensor] = None,
                         extra_topk_length: Optional[torch.Tensor] = None,
                         impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode (workbench.decode.sparse_mla_decode without a plan); see the module docstring.

    Every argument may be given by keyword; they are positional too, in this order, because torch.library's
    operators do not take keyword-only tensors.
    """
    cache, extra_cache = _whole_pages("cache", cache), _whole_pages("extra_cache", extra_cache)
    out, lse = decode.sparse_mla_decode(q, cache, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                        topk_length=topk_length, extra_cache=extra_cache,
                                        extra_indices=extra_indices, extra_topk_length=extra_topk_length,
                                        impl=impl)
    # without a plan both are fresh allocations, contiguous, as the fake says; contiguous() is a no-op then
    return out.contiguous(), lse.contiguous()


def _whole_pages(name: str, cache):
    """``cache`` when the kernels can read it in place, else a copy with its page stride restored (warned).

    Code that copies an operator's inputs loses a cache's page padding (see :func:`workbench.format.codec.to_device`):
    ``torch.clone`` (what ``torch.library.opcheck``'s AOT tests run) packs the pages' rows (stride(0) ==
    block_size*584), and a copy that keeps strides (opcheck's other tests, CUDA-graph trees staging an input that
    is not static) ends the storage at the last token's byte. :func:`workbench.sparse_mla_decode` refuses both; the
    operator decodes from a copy in the page layout instead: a copy of the whole cache, so keep a real engine's
    cache out of such copies (static in a CUDA graph). Anything else is passed on unchanged, for the decode's own
    checks to judge.
    """
    if not isinstance(cache, torch.Tensor) or cache.dim() != 4:
        return cache
    nb, bs = cache.shape[:2]
    stride0 = cache.stride(0)
    if stride0 == MODEL1.page_bytes(bs) and \
            cache.untyped_storage().nbytes() >= cache.storage_offset() + nb * stride0:
        return cache  # the usual case, decided without the full check
    try:
        check_cache(name, cache)
        return cache  # another page stride the kernels accept
    except (TypeError, ValueError):
        pass
    try:
        fixed = copy_cache(cache)
        check_cache(name, fixed)
    except (TypeError, ValueError):
        return cache  # not a copy of a cache: the decode's validation says why
    warnings.warn(f"{name}: a copy of a cache that lost its page padding (stride(0)={stride0}, storage "
                  f"{cache.untyped_storage().nbytes()} bytes); decoding from a copy in the page layout "
                  f"(stride(0)={fixed.stride(0)})", stacklevel=3)
    return fixed


@sparse_mla_decode_op.register_fake
def _sparse_mla_decode_fake(q, cache, indices, sm_scale=None, attn_sink=None, topk_length=None,
                            extra_cache=None, extra_indices=None, extra_topk_length=None, impl="auto"):
    check_tensor("q", q, dtype=torch.bfloat16, ndim=4)  # the shapes below come from q
    b, s_q, h, _ = q.shape
    out = q.new_empty((b, s_q, h, MODEL1.d), dtype=torch.bfloat16)
    lse = q.new_empty((b, h, s_q), dtype=torch.float32)
    return out, lse


__all__ = ["OP_NAME", "sparse_mla_decode_op"]
