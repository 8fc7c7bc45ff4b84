"""The cache module's old home, kept as a re-export: ``from workbench.cache import X`` still works.

The byte codec (quantise/dequantise, row and page views, ``to_device``/``copy_cache``, raw scale bytes, the
index maths) lives in :mod:`workbench.codec`; the hostile case builder and the case catalogue in
:mod:`workbench.cases`. New code imports from those.
"""
from __future__ import annotations

from .cases import (CATALOGUE, DecodeCase, DecodeScope, HostileCase, _build_scope, build_case,  # noqa: F401
                    catalogue)
from .codec import (_decode_rows, _row_views, copy_cache, dequantize_kv, gather_dequantized,  # noqa: F401
                    indices_to_positions, page_bytes_view, positions_to_indices, quantize_kv, raw_scale_bytes,
                    to_device, valid_index_mask)


def _to_device(cache, device):
    """Move a cache with its page stride (the old private helper; :func:`workbench.codec.to_device` is public)."""
    return to_device(cache, device)


__all__ = ["CATALOGUE", "DecodeCase", "DecodeScope", "HostileCase", "build_case", "catalogue", "copy_cache",
           "dequantize_kv", "gather_dequantized", "indices_to_positions", "page_bytes_view", "positions_to_indices",
           "quantize_kv", "raw_scale_bytes", "to_device", "valid_index_mask"]
