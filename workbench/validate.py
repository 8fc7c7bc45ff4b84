"""Argument checks shared by the reference, the kernels and the benchmarks.

Bad input must fail here with a message naming the argument, never deep inside
torch or Triton.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .format.layout import MODEL1, CacheLayout

CACHE_DTYPES = (torch.uint8, torch.float8_e4m3fn)
# Why a cache's page stride is gone, and what keeps it; shown with every stride rejection.
MOVE_HINT = ("; .clone(), .contiguous() and .to(device) drop a cache's page padding: move or copy a cache with "
             "workbench.format.codec.to_device(cache, device), which keeps it (and restores it on such a copy)")


def _fail(cls, name: str, expected: str, got) -> None:
    raise cls(f"{name}: expected {expected}, got {got}")


def check_tensor(name: str, t, *, dtype=None, ndim=None) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(TypeError, name, "a torch.Tensor", type(t).__name__)
    if dtype is not None:
        dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in dtypes:
            _fail(TypeError, name, "dtype " + " or ".join(str(d) for d in dtypes), t.dtype)
    if ndim is not None and t.dim() != ndim:
        _fail(ValueError, name, f"{ndim} dimensions", f"shape {tuple(t.shape)}")


def check_cache(name: str, cache, layout: CacheLayout = MODEL1, *, whole_pages: bool = True) -> tuple[int, int, int]:
    """Check a paged cache view; return (num_blocks, block_size, page_stride_bytes).

    whole_pages: also require storage for the last page's padding (the kernels read pages as one flat run).
    """
    check_tensor(name, cache, dtype=CACHE_DTYPES, ndim=4)
    nb, bs, one, w = cache.shape
    if w != layout.bytes_per_token or one != 1:
        _fail(ValueError, name, f"shape [num_blocks, block_size, 1, {layout.bytes_per_token}]",
              f"shape {tuple(cache.shape)}")
    if nb < 1 or bs < 1:
        _fail(ValueError, name, "at least one page of at least one token", f"shape {tuple(cache.shape)}")
    s0, s1, s2, s3 = cache.stride()
    if (s1, s3) != (layout.bytes_per_token, 1) or (s2 != layout.bytes_per_token and one != 1):
        _fail(ValueError, name, f"strides (page_bytes, {layout.bytes_per_token}, "
              f"{layout.bytes_per_token}, 1)", f"{cache.stride()}{MOVE_HINT}")
    if s0 < bs * layout.bytes_per_token or s0 % layout.page_alignment:
        _fail(ValueError, name, f"a page stride that is a multiple of {layout.page_alignment} and at least "
              f"block_size*{layout.bytes_per_token}={bs * layout.bytes_per_token} "
              f"(layout: {layout.page_bytes(bs)})", f"stride(0)={s0}{MOVE_HINT}")
    # The kernels load a token's bytes as 16-, 8- and 4-byte words from the cache's first byte on (the Gluon rungs
    # read the rope as 8-byte words): a view that starts off a 16-byte boundary would fault on the GPU.
    if cache.data_ptr() % 16:
        _fail(ValueError, name, "a first byte on a 16-byte boundary (torch allocations are; a view with a storage "
              "offset may not be)", f"data_ptr() % 16 = {cache.data_ptr() % 16} (storage_offset="
              f"{cache.storage_offset()}); workbench.format.codec.to_device(cache, device) copies it")
    # The kernels view each scope as one flat run of num_blocks whole pages, so the storage must hold the last
    # page's padding too; a view that ends at the last token's byte would fail deep inside torch instead.
    need = cache.storage_offset() + nb * s0  # uint8 and float8 elements are one byte
    have = cache.untyped_storage().nbytes()
    if whole_pages and have < need:
        _fail(ValueError, name, f"storage for {nb} whole pages of stride(0)={s0} bytes ({need} bytes from the "
              "start of its storage, the last page's padding included)",
              f"{have} bytes; workbench.format.codec.to_device(cache, device) copies it into whole pages")
    return nb, bs, s0


def check_sm_scale(name: str, sm_scale) -> float | None:
    """A positive finite real: a Python or numpy scalar, or a 0-dim tensor or array; returns it as a float."""
    if sm_scale is None:
        return None
    value = _real_scalar(sm_scale)
    if value is None or not (math.isfinite(value) and value > 0):
        _fail(ValueError, name, "a positive finite real (float, numpy scalar or 0-dim tensor)", repr(sm_scale))
    return value


def _real_scalar(x) -> float | None:
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, numbers.Real):  # int, float and numpy's int/float scalars
        return float(x)
    if isinstance(x, torch.Tensor) and x.dim() == 0 and not (x.dtype.is_complex or x.dtype == torch.bool):
        return float(x)
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "fiu":
        return float(x)
    return None


def check_indices(name: str, indices, b: int, s_q: int) -> int:
    check_tensor(name, indices, dtype=torch.int32, ndim=3)
    if tuple(indices.shape[:2]) != (b, s_q) or indices.shape[2] < 1:
        _fail(ValueError, name, f"shape [{b}, {s_q}, topk>=1] (from q)", f"shape {tuple(indices.shape)}")
    return indices.shape[2]


def check_topk_length(name: str, topk_length, b: int):
    if topk_length is None:
        return
    check_tensor(name, topk_length, dtype=torch.int32, ndim=1)
    if topk_length.shape[0] != b:
        _fail(ValueError, name, f"shape [{b}] (batch of q)", f"shape {tuple(topk_length.shape)}")


def check_decode_args(q, cache, indices, *, sm_scale, attn_sink, topk_length,
                      extra_cache, extra_indices, extra_topk_length,
                      layout: CacheLayout = MODEL1) -> dict:
    """Validate a decode call; return the problem's sizes."""
    check_tensor("q", q, dtype=torch.bfloat16, ndim=4)
    b, s_q, h, d = q.shape
    if d != layout.d:
        _fail(ValueError, "q", f"last dimension {layout.d}", f"shape {tuple(q.shape)}")
    if b < 1 or s_q < 1 or h < 1:
        _fail(ValueError, "q", "non-empty batch, s_q and heads", f"shape {tuple(q.shape)}")
    nb, bs, stride0 = check_cache("cache", cache, layout)
    topk = check_indices("indices", indices, b, s_q)
    check_topk_length("topk_length", topk_length, b)
    check_sm_scale("sm_scale", sm_scale)
    if attn_sink is not None:
        check_tensor("attn_sink", attn_sink, dtype=torch.float32, ndim=1)
        if attn_sink.shape[0] != h:
            _fail(ValueError, "attn_sink", f"shape [{h}] (heads of q)", f"shape {tuple(attn_sink.shape)}")
    has_extra = extra_cache is not None or extra_indices is not None or extra_topk_length is not None
    extra = None
    if has_extra:
        if extra_cache is None or extra_indices is None:
            raise ValueError("extra_cache and extra_indices: give both or neither "
                             f"(got extra_cache={'set' if extra_cache is not None else None}, "
                             f"extra_indices={'set' if extra_indices is not None else None})")
        enb, ebs, estride0 = check_cache("extra_cache", extra_cache, layout)
        etopk = check_indices("extra_indices", extra_indices, b, s_q)
        check_topk_length("extra_topk_length", extra_topk_length, b)
        extra = dict(num_blocks=enb, block_size=ebs, stride0=estride0, topk=etopk)
    for name, t in dict(cache=cache, indices=indices, attn_sink=attn_sink, topk_length=topk_length,
                        extra_cache=extra_cache, extra_indices=extra_indices,
                        extra_topk_length=extra_topk_length).items():
        if t is not None and t.device != q.device:
            _fail(ValueError, name, f"the device of q ({q.device}), like every tensor argument", t.device)
    return dict(b=b, s_q=s_q, h=h, num_blocks=nb, block_size=bs, stride0=stride0,
                topk=topk, extra=extra)
