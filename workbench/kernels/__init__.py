"""Triton kernels for sparse MLA decode over the MODEL1 paged FP8 cache."""
