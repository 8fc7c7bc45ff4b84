"""The f16 rungs' window and their exact fallback (GPU only: Gluon; the H200).

``F16=1`` dequantises with the hardware e4m3 -> f16 pair convert and one f16 multiply by 2**(e-127+7): exact for
scale bytes in [F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE] = [105, 127] and rope values below 512; q is scaled per
head by a power of two, so any q fits. A split that meets a valid token outside that window runs again with bf16
operands, so every cache the format can hold gives FlashMLA's numbers: the tests put one token's tile at bytes
outside the window (0 to 254), q and rope values up to bf16's range, and check every query against the fp32
reference. ``test_the_window_tests_can_fail`` checks on the CPU, with the fp32 reference standing in for a kernel,
that a wrong bottom edge (0, or twice or half the scale) fails them.
"""
import math

import pytest
import torch

from workbench import registry
from workbench.format.codec import page_bytes_view, quantize_kv, raw_scale_bytes, to_device
from workbench.decode import sparse_mla_decode
from workbench.kernels.gluon_common import F16_K_SHIFT, F16_MAX_SCALE_BYTE, F16_MIN_SCALE_BYTE
from workbench.kernels.wgmma_ws import ws_partial_kernel
from workbench.kernels.wgmma_ws_bal import ws_bal_partial_kernel
from workbench.kernels.wgmma_ws_h64 import ws_h64_partial_kernel
from workbench.metrics import compare

# the rungs with an f16 window: those of wgmma's kernel and of portable_ws_h32t's with F16=1 (rung 26), and the
# warp-specialised Hopper rungs' (f16 throughout, no switch: wgmma_ws, and rungs 15 and 16 in 64-head groups)
F16_ALWAYS = (ws_partial_kernel, ws_h64_partial_kernel, ws_bal_partial_kernel)
F16_RUNGS = tuple(n for n in registry.names("split")
                  if registry.get(n).fixed_meta.get("F16") or registry.get(n).jit in F16_ALWAYS)
B, H, TOPK, PAGES, BS = 3, 16, 128, 6, 64
Q_COL, ROPE_AT = 5, (4, 17, 448 + 9)  # (page, token, column): a token only query 2 selects
ROPE_LIMIT = 2.0 ** (16 - F16_K_SHIFT)  # 512: the first rope magnitude outside the f16 tile
E4M3_TINY = 0x01  # the e4m3 byte of 2**-9, its smallest: 2**-9 * 2**127 stays finite through the decode


def _case(seed=0, device="cuda", rope_value=None):
    """Queries that each select 128 shuffled tokens of their own two pages (query b: pages 2b, 2b+1). Query 0's
    pages have their first tile scaled to the window's top (amax 448: byte 127), which dominates its output.
    Query 1's pages have every nope tile at the window's bottom (byte 105: 2**-22, as vLLM's writers give a tile
    of amax <= 1e-4; written by hand, as the quantiser's floor is byte 114) and a rope shrunk to 1e-3, so those
    tiles dominate its output. Query 2's pages are plain but for column Q_COL, positive in every token;
    ``rope_value`` goes in one of their rope columns, ROPE_AT."""
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(PAGES, BS, 512, generator=g)
    kv[:2, :, :64] *= 448 / kv[:2, :, :64].abs().amax(dim=-1, keepdim=True)
    kv[2:4, :, 448:] *= 1e-3
    kv[4:6, :, Q_COL] = kv[4:6, :, Q_COL].abs() + 0.5
    if rope_value is not None:
        kv[ROPE_AT] = rope_value
    cache = quantize_kv(kv.to(torch.bfloat16))
    cache = cache if device == "cpu" else to_device(cache, device)
    sb = raw_scale_bytes(cache)
    assert int(sb[:2, :, 0].max()) == F16_MAX_SCALE_BYTE  # the quantiser put the top of the window there
    sb[2:4, :, :7] = F16_MIN_SCALE_BYTE
    idx = torch.stack([torch.randperm(2 * BS, generator=g) + 2 * b * BS for b in range(B)]).int()
    q = (torch.randn(B, 1, H, 512, generator=g) * 0.1).to(torch.bfloat16).to(device)
    return q, cache, idx[:, None, :].to(device)


def per_query(out, lse, ref_out, ref_lse):
    """compare() of each query alone: its tolerance scales with the norm it is given, and the queries' outputs
    differ by orders of magnitude."""
    return [compare(out[b:b + 1], lse[b:b + 1], ref_out[b:b + 1], ref_lse[b:b + 1]) for b in range(out.shape[0])]


def _assert_exact(q, cache, idx, impl, queries=range(B)):
    out, lse = sparse_mla_decode(q, cache, idx, impl=impl)
    ms = per_query(out, lse, *sparse_mla_decode(q, cache, idx, impl="reference"))
    for b in queries:
        assert ms[b]["passed"], (b, ms[b])


def test_every_f16_rung_is_covered():
    """The GPU tests below run every rung with an f16 window: the four "auto" picks among on sm_90 (rung 15,
    wgmma_ws_h64, is its default at b64 h64 and h128; its 64-head group holds the tests' 16 heads and 48 masked
    ones), rung 16 (wgmma_ws_bal, rung 15's sibling), and rung 26 (portable_ws_h32f), which it picks among off
    sm_90."""
    assert set(F16_RUNGS) == {"wgmma_f16", "wgmma_f16_2cta", "wgmma_ws", "wgmma_ws_h64", "wgmma_ws_bal",
                              "portable_ws_h32f"}


@pytest.mark.gpu
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_the_window_edges_are_exact(impl):
    _assert_exact(*_case(), impl)


OUTSIDE = [0, 1, F16_MIN_SCALE_BYTE - 1, F16_MAX_SCALE_BYTE + 1, 134, 200, 254]


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [2, 5], ids=["tile2", "tile5"])
@pytest.mark.parametrize("byte", OUTSIDE, ids=[f"byte{b}" for b in OUTSIDE])
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_a_scale_outside_the_window_is_exact(impl, byte, tile):
    """One token of query 1 gets ``tile`` at ``byte``, its fp8 codes 2**-9 (finite through the decode even at byte
    254, and dominant from byte 128 up): its split runs again in bf16 and every query matches the reference. Tiles
    2 and 5: a scale byte in each half of the token's 8 scale bytes (a kernel may read them as two words)."""
    q, cache, idx = _case()
    page, off = divmod(int(idx[1, 0, 7]), BS)
    raw_scale_bytes(cache)[page, off, tile] = byte
    page_bytes_view(cache)[page, off * 576 + tile * 64: off * 576 + (tile + 1) * 64] = E4M3_TINY
    _assert_exact(q, cache, idx, impl)


Q_VALUES = [65280.0, 65536.0, 1e6, 3e38]


@pytest.mark.gpu
@pytest.mark.parametrize("value", Q_VALUES, ids=["65280", "65536", "1e6", "3e38"])
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_q_anywhere_in_bf16(impl, value):
    """-value in head 3's q, column Q_COL, and value * 1e-6 in head 4, where query 2's keys are positive and, by
    their tile's scale byte, about 100 / value in that column, so that the scores stay moderate (at scores near
    1e28 an fp32 lse cannot tell one tied token from two, which makes the split plan, FlashMLA's too, decide the
    output). Each head is scaled by its own power of two: 65536 and 1e6 stay in the f16 pass (scale bytes 118 and
    114), 3e38 needs byte 6 and so the bf16 pass; every head of every query matches the reference."""
    q, cache, idx = _case()
    q[2, 0, 3, Q_COL] = -value
    q[2, 0, 4, Q_COL] = value * 1e-6
    raw_scale_bytes(cache)[4:6, :, 0] = 127 + 7 - round(math.log2(value))  # tile 0 of query 2's pages
    _assert_exact(q, cache, idx, impl)


ROPE_VALUES = [ROPE_LIMIT - 2, ROPE_LIMIT, 4e4, 1e30]


@pytest.mark.gpu
@pytest.mark.parametrize("value", ROPE_VALUES, ids=["510", "512", "4e4", "1e30"])
@pytest.mark.parametrize("impl", F16_RUNGS)
def test_rope_anywhere_in_bf16(impl, value):
    """One rope value of query 2's tokens at ``value``: below 512 the f16 tile holds it, from 512 up its split
    runs again in bf16; every query matches the reference."""
    _assert_exact(*_case(rope_value=value), impl)


@pytest.mark.parametrize("wrong", [0, F16_MIN_SCALE_BYTE + 1, F16_MIN_SCALE_BYTE - 1], ids=["zero", "double", "half"])
def test_the_window_tests_can_fail(wrong):
    """Runs anywhere: the reference on a cache whose bottom-edge bytes were read as another value fails query 1's
    check (and only query 1's), so a kernel that mishandles the subnormal scale at the window's bottom cannot
    pass."""
    q, cache, idx = _case(device="cpu")
    ref = sparse_mla_decode(q, cache, idx, impl="reference")
    raw_scale_bytes(cache)[2:4, :, :7] = wrong
    passed = [m["passed"] for m in per_query(*sparse_mla_decode(q, cache, idx, impl="reference"), *ref)]
    assert passed == [True, False, True], passed
