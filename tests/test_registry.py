"""The kernel registry, typed configs, the prune hooks' view of a launch, and the bf16 dequant formula."""
import pytest
import torch
import triton

import workbench as wb
from workbench import bench, registry
from workbench.kernels import mma as mma_mod
from workbench.kernels import tile512 as tile512_mod
from workbench.kernels.tuning import target_override
from workbench.kernels.configs import SimtConfig, TiledConfig


def _prune_as_triton_does(autotuner, **launch_kwargs):
    """What Triton 3.6's Autotuner.run does before tuning: nargs from positionals only, then prune."""
    autotuner.nargs = dict(zip(autotuner.arg_names, ()))  # the launchers pass no positionals
    try:
        return autotuner.prune_configs(launch_kwargs)
    finally:
        autotuner.nargs = None


@pytest.mark.parametrize("kernel", [mma_mod.mma_partial_kernel, tile512_mod.tile512_partial_kernel],
                         ids=["mma", "tile512"])
@pytest.mark.parametrize("heads,group", [(16, 16), (20, 32), (64, 64), (128, 64)])
def test_autotuner_prunes_to_the_head_group_of_the_call(kernel, heads, group):
    with target_override("sm_90"):
        kept = _prune_as_triton_does(kernel, H=heads, TOKENS_BUCKET=512, QUERIES_BUCKET=64)
    assert kept and {c.kwargs["BLOCK_H"] for c in kept} == {group}


def test_registry_lists_every_builtin_kind():
    assert {"mma", "simt", "reference", "tile512", "wgmma_xchg"} <= set(registry.decode_impls())
    assert registry.names("probe") == ("gather", "gather_async")
    assert [r.name for r in registry.rungs()][:3] == ["mma", "tile512", "wgmma_xchg"]
    assert all(r.prediction for r in registry.rungs()), "a rung states what it should move before it is measured"


def test_unknown_impl_names_the_registered_ones():
    case = wb.build_case(batch=1, heads=2, topk=4)
    with pytest.raises(ValueError, match="tile512"):
        wb.sparse_mla_decode(**case.kwargs(), impl="nope")


def test_typed_config_round_trip_and_errors():
    spec = registry.get("tile512")
    c = spec.check_config({"BLOCK_H": 16, "BLOCK_T": 32, "num_warps": 8})
    assert c == TiledConfig(BLOCK_H=16, BLOCK_T=32, num_warps=8, num_stages=1)
    assert c.label == "BLOCK_H=16,BLOCK_T=32,num_warps=8,num_stages=1"
    assert c.columns() == dict(BLOCK_H=16, BLOCK_T=32, num_warps=8, num_stages=1)
    assert spec.check_config(c.to_triton()) == c and spec.check_config(c) == c
    from workbench.report.results import parse_config
    assert spec.check_config(parse_config(c.label)) == c  # the label in a CSV reads back to the same config
    with pytest.raises(ValueError, match="PREFETCH"):
        spec.check_config({"BLOCK_H": 16, "BLOCK_T": 32, "PREFETCH": 1})
    with pytest.raises(ValueError, match="BLOCK_T=24"):
        spec.check_config({"BLOCK_H": 16, "BLOCK_T": 24})
    with pytest.raises(ValueError, match="missing"):
        spec.check_config({"BLOCK_T": 32})
    with pytest.raises(ValueError, match="takes no kernel config"):
        registry.get("reference").check_config({"BLOCK_T": 32})


def test_simt_has_a_typed_config_and_the_lab_finds_it_through_the_registry():
    from workbench.lab import resources
    from workbench.kernels import simt
    spec = registry.get("simt")
    c = spec.check_config({"BLOCK_T": 32, "num_warps": 4})
    assert c == SimtConfig(BLOCK_T=32, num_warps=4) and c.label == "BLOCK_T=32,num_warps=4,num_stages=1"
    assert spec.check_config(c.to_triton()) == c and spec.check_config(c) == c
    with pytest.raises(ValueError, match="missing"):
        spec.check_config({"num_warps": 4})
    with pytest.raises(ValueError, match="BLOCK_H"):
        spec.check_config({"BLOCK_H": 16, "BLOCK_T": 32})
    # the autotuner times the typed space, as triton.Configs
    assert [SimtConfig.from_triton(t) for t in simt.simt_kernel.configs] == list(simt.CONFIG_SPACE)
    assert "simt" in registry.compiled_kernels() and "simt" not in resources.LAB_EXTRAS
    # the space the lab compiles is every allowed (BLOCK_T, num_warps), none left out
    allowed = simt.ALLOWED
    assert sorted((c.BLOCK_T, c.num_warps, c.num_stages) for c in resources.lab_kernel("simt").configs) == sorted(
        (bt, w, st) for bt in allowed["BLOCK_T"] for w in allowed["num_warps"] for st in allowed["num_stages"])


def test_dequant_bits_formula_is_exact_for_every_code_and_scale():
    """The bf16 dequant of the Gluon kernels (common.e4m3_bf16x2_asm, gluon_common.bf16_scale_pairs), in torch:
    the bf16 bits of the e4m3 byte times 2**120 (bf16 0x7B80) is the fp8 value exactly, and times the scale's
    bf16 (0x0040 for byte 0, else e << 7) it is bf16(fp8) * bf16(2**(e-127)), FlashMLA's value, for every code
    and every scale byte 0..254 (each an exact-then-rounded bf16 multiply, as mul.rn.bf16x2 does)."""
    b = torch.arange(256, dtype=torch.int32)
    finite = (b & 0x7F) != 0x7F  # e4m3fn has NaN at 0x7F and 0xFF only
    bits = ((b & 0x80) << 8) | ((b & 0x7F) << 4)
    as_bf16 = bits.to(torch.int16).view(torch.bfloat16)
    exact = b.to(torch.uint8).view(torch.float8_e4m3fn).float()
    c120 = torch.tensor(0x7B80, dtype=torch.int16).view(torch.bfloat16)
    assert c120.item() == 2.0 ** 120
    assert torch.equal((as_bf16 * c120).float()[finite], exact[finite])
    for e in range(255):
        sc = torch.tensor([0x0040 if e == 0 else e << 7], dtype=torch.int16).view(torch.bfloat16)
        assert sc.item() == 2.0 ** (e - 127)
        got = (as_bf16 * c120) * sc
        want = exact.to(torch.bfloat16) * torch.tensor(2.0 ** (e - 127), dtype=torch.bfloat16)
        assert torch.equal(got[finite], want[finite]), e


def test_auto_picks_by_device_and_call_size(monkeypatch):
    """'auto' follows the crossover sweep on sm_90 and the portable rung elsewhere."""
    import workbench.kernels.common as common
    assert registry.resolve("auto", "cpu", heads=64, tokens=64 * 2048) == "tile512"
    assert registry.resolve("mma", "cpu", heads=64, tokens=64 * 2048) == "mma"  # named: never replaced
    monkeypatch.setattr(common, "INTERPRET", False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    # <= 16 heads: the bf16 rung up to 8192 tokens, wgmma_ws from 65536 tokens (at 2**18 and 2**19 too: the 64-head
    # block's step there is gone), wgmma_f16 between
    assert registry.resolve("auto", "cuda", heads=16, tokens=512) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=16, tokens=4 * 2048) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=16, tokens=4 * 2048 + 1) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=64 * 640) == "wgmma_f16"  # its tokens in one scope
    # ... with two scopes (the production shape, topk 128 + extra 512) rung 15 from 2**15 tokens, at any size above,
    # as it reads both scopes as one stream (production sweep at 90799f7: b64 26.93 us against the two-block rung's
    # 28.04, b128 38.15 against wgmma_ws's 45.27; b32 19.24 against wgmma_f16's 16.04)
    assert registry.resolve("auto", "cuda", heads=16, tokens=64 * 640, queries=64, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=16, tokens=1 << 15, queries=52, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=16, tokens=(1 << 15) - 1, queries=52, scopes=2) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=128 * 640, queries=128, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=16, tokens=132 * 640, queries=132, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=16, tokens=1 << 24, queries=1 << 15, scopes=2) == "wgmma_ws_h64"
    # ... only for rows of fewer than 1024 tokens a query, as measured (640), and only where the queries are known;
    # long rows keep the one-scope steps (wgmma_f16, then wgmma_ws from 65536 tokens)
    assert registry.resolve("auto", "cuda", heads=16, tokens=32 * 1024, queries=32, scopes=2) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=16 * 2560, queries=16, scopes=2) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=64 * 2560, queries=64, scopes=2) == "wgmma_ws"
    assert registry.resolve("auto", "cuda", heads=16, tokens=64 * 640, scopes=2) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=128 * 640, scopes=2) == "wgmma_ws"
    assert registry.resolve("auto", "cuda", heads=16, tokens=32 * 640, queries=32, scopes=2) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=128 * 640, queries=128) == "wgmma_ws"  # one scope
    assert registry.resolve("auto", "cuda", heads=8, tokens=64 * 640, queries=64, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=1, tokens=4 * 2048 + 1, queries=64, scopes=2) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=32 * 2048 - 1) == "wgmma_f16"
    assert registry.resolve("auto", "cuda", heads=16, tokens=32 * 2048) == "wgmma_ws"  # from 65536 tokens up
    assert registry.resolve("auto", "cuda", heads=16, tokens=64 * 2048) == "wgmma_ws"
    assert registry.resolve("auto", "cuda", heads=16, tokens=128 * 2048 - 1) == "wgmma_ws"
    assert registry.resolve("auto", "cuda", heads=16, tokens=128 * 2048) == "wgmma_ws"
    assert registry.resolve("auto", "cuda", heads=16, tokens=192 * 2048) == "wgmma_ws"  # 3.9% ahead on an H100
    assert registry.resolve("auto", "cuda", heads=16, tokens=1 << 24) == "wgmma_ws"
    assert registry.resolve("auto", "cuda", heads=8, tokens=4 * 2048 + 1) == "wgmma_f16"  # padded to 16 heads
    # 17-32 heads: the 16-head groups up to 4096 tokens, wgmma_xchg below 16384, then the 32-head portable block,
    # the 64-head block from 32768 tokens (one split or not), and wgmma_f16 below that for a call of one split (no
    # combine: from 89 queries of one scope)
    assert registry.resolve("auto", "cuda", heads=32, tokens=4096) == "wgmma_f16_2cta"
    assert registry.resolve("auto", "cuda", heads=32, tokens=4097) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=32, tokens=16 * 512, queries=16) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=32, tokens=16383) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=17, tokens=16384) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=32, tokens=32767) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=32, tokens=32768) == "wgmma_ws_h64"  # b16 topk2048, b64 topk512
    assert registry.resolve("auto", "cuda", heads=32, tokens=32 * 2048) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=20, tokens=64 * 2048) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=32, tokens=128 * 2048) == "wgmma_ws_h64"  # queries unknown
    assert registry.resolve("auto", "cuda", heads=32, tokens=128 * 512, queries=88) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=24, tokens=128 * 512, queries=128) == "wgmma_ws_h64"  # one split
    assert registry.resolve("auto", "cuda", heads=24, tokens=128 * 128, queries=128) == "wgmma_f16"  # below 32768
    assert registry.resolve("auto", "cuda", heads=24, tokens=89 * 512, queries=89) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=24, tokens=128 * 512, queries=89) == "wgmma_ws_h64"  # 736 a query
    assert registry.resolve("auto", "cuda", heads=32, tokens=89 * 320, queries=89) == "wgmma_f16"  # below 32768
    assert registry.resolve("auto", "cuda", heads=32, tokens=128 * 2048, queries=128) == "wgmma_ws_h64"
    # 33-63 heads: as 64 heads (one 64-head block), so the same boundaries in tokens as at h64
    for h in (33, 40, 48, 63):
        assert registry.resolve("auto", "cuda", heads=h, tokens=4095) == "wgmma_f16_2cta", h
        assert registry.resolve("auto", "cuda", heads=h, tokens=4096) == "wgmma_xchg", h
        assert registry.resolve("auto", "cuda", heads=h, tokens=8 * 1024 - 1) == "wgmma_xchg", h
        assert registry.resolve("auto", "cuda", heads=h, tokens=2 * 2048, queries=2) == "portable_ws_h32p", h  # 2**18
        assert registry.resolve("auto", "cuda", heads=h, tokens=8 * 512, queries=8) == "wgmma_xchg", h  # 512 a query
        assert registry.resolve("auto", "cuda", heads=h, tokens=2 * 2048) == "wgmma_xchg", h  # queries unknown
        assert registry.resolve("auto", "cuda", heads=h, tokens=8 * 1024) == "portable_ws_h32f", h
        assert registry.resolve("auto", "cuda", heads=h, tokens=8 * 2048) == "wgmma_ws_h64", h
        assert registry.resolve("auto", "cuda", heads=h, tokens=64 * 2048) == "wgmma_ws_h64", h
    # >= 64 heads, by head-tokens: the 16-head groups below 2**18, the bf16 rung or rung 26 below 2**20 (the bf16
    # rung on it), then the 64-head block
    assert registry.resolve("auto", "cuda", heads=64, tokens=512) == "wgmma_f16_2cta"  # small call, 64 heads
    assert registry.resolve("auto", "cuda", heads=64, tokens=4095) == "wgmma_f16_2cta"
    assert registry.resolve("auto", "cuda", heads=64, tokens=4096) == "wgmma_f16_2cta"  # 2**18, queries unknown
    assert registry.resolve("auto", "cuda", heads=64, tokens=4097) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 1024 - 1) == "wgmma_xchg"
    # ... and from 2**18 for calls of 2048 tokens a query or more (known queries; an extra scope counts its tokens),
    # rung 25 below 2**19 (b1 h128 topk2048: 0.925-0.996x rung 26's time in all 15 H100 crossovers since 2026-12-05;
    # b2 h64 topk2048: 0.977-0.995x in 14 of them), rung 26 from 2**19
    assert registry.resolve("auto", "cuda", heads=64, tokens=2 * 2048, queries=2) == "portable_ws_h32p"  # b2 topk2048
    assert registry.resolve("auto", "cuda", heads=64, tokens=4 * 2048 - 1, queries=2) == "portable_ws_h32p"
    assert registry.resolve("auto", "cuda", heads=64, tokens=4 * 2048, queries=2) == "portable_ws_h32f"  # 2**19
    # ... for calls of one scope: with an extra scope the portable rungs launch a scope at a time (production b8
    # h128 topk 128 + extra 512 at c8e518c: 27.5 us against wgmma_xchg's 18.8 at dcff189)
    assert registry.resolve("auto", "cuda", heads=64, tokens=2 * 2048, queries=2, scopes=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=8 * 640, queries=8, scopes=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=8 * 640, queries=8) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=128, tokens=2 * 2048 - 1, queries=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 512, queries=8) == "wgmma_f16_2cta"  # b8 topk512
    assert registry.resolve("auto", "cuda", heads=128, tokens=2048, queries=1) == "portable_ws_h32p"  # b1 topk2048
    assert registry.resolve("auto", "cuda", heads=128, tokens=4 * 512, queries=4) == "wgmma_f16_2cta"  # 2**18 itself
    assert registry.resolve("auto", "cuda", heads=128, tokens=2048, queries=1) == "portable_ws_h32p"  # long rows
    assert registry.resolve("auto", "cuda", heads=64, tokens=1024, queries=1) == "wgmma_f16_2cta"  # below 2**18
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 1024) == "portable_ws_h32f"  # 2**19 head-tokens
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 2048 - 1) == "portable_ws_h32f"
    # 2**20 itself: wgmma_xchg from 64 heads (b8 h64 topk2048, b32 h64 topk512), the 64-head block at 33-63
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 2048) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 2048, queries=8) == "wgmma_xchg"  # long rows too
    assert registry.resolve("auto", "cuda", heads=64, tokens=32 * 512, queries=32) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=40, tokens=8 * 2048, queries=8) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=48, tokens=8 * 2048, queries=8) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=63, tokens=8 * 2048, queries=8) == "wgmma_ws_h64"
    # ... and, unmeasured (no sweep has the shapes; the docstring says so), a one-split call and a call of two scopes
    assert registry.resolve("auto", "cuda", heads=64, tokens=128 * 128, queries=128) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=40, tokens=128 * 128, queries=128) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 2048, queries=8, scopes=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8 * 2048 + 1) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 2048) == "wgmma_ws_h64"
    # ... also for a call of one split (89 queries or more, one scope) of at most 512 tokens a query at one 64-head
    # group, since rung 15 stages its one-split output (b128 h64 topk512: 35.46 us against wgmma_f16's 41.64, H100
    # crossover at aa7560b)
    assert registry.resolve("auto", "cuda", heads=64, tokens=128 * 512, queries=128) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=65, tokens=128 * 512, queries=128) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=128, tokens=128 * 512, queries=128) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=40, tokens=89 * 512, queries=89) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=88 * 512, queries=88) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=128 * 512 + 1, queries=128) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=128 * 2048, queries=128) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=128 * 512, queries=128, scopes=2) == "wgmma_ws_h64"
    # ... and a call of two scopes takes the same steps, since rung 15 reads both scopes as one stream (the
    # production shape, topk 128 + 512, on an H100: b16 h128 23.21 us against wgmma_xchg's 23.69, b32 h64 25.04
    # against 25.03, b64 h64 34.41 against 47.33; below 2**20 wgmma_xchg 0.99-1.00x at 2**19.3, 0.97x at 2**18.3)
    assert registry.resolve("auto", "cuda", heads=128, tokens=16 * 640, queries=16, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=32 * 640, queries=32, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 640, queries=64, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=40, tokens=64 * 640, queries=64, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=128, tokens=8 * 640, queries=8, scopes=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=64, tokens=16 * 640, queries=16, scopes=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=64 * 640, queries=64, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=128, tokens=128 * 640, queries=128, scopes=2) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=32, tokens=64 * 640, queries=64, scopes=2) == "wgmma_ws_h64"
    # the step's edges at 128 heads and at 33-63 (counted as 64): 2**20 itself at 64 heads and up stays on
    # wgmma_xchg, at 33-63 goes to rung 15, with one scope or two
    assert registry.resolve("auto", "cuda", heads=128, tokens=1 << 13, scopes=2) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=(1 << 13) + 1, scopes=2) == "wgmma_ws_h64"
    for h in (40, 48, 63):
        assert registry.resolve("auto", "cuda", heads=h, tokens=8 * 2048, queries=8, scopes=2) == "wgmma_ws_h64", h
        assert registry.resolve("auto", "cuda", heads=h, tokens=8 * 2048, queries=8) == "wgmma_ws_h64", h
    assert registry.resolve("auto", "cuda", heads=64, tokens=16 * 2048, queries=16) == "wgmma_ws_h64"  # not one split
    assert registry.resolve("auto", "cuda", heads=64, tokens=4096, queries=128) == "wgmma_f16_2cta"  # small: 2**18
    assert registry.resolve("auto", "cuda", heads=64, tokens=4224, queries=132) == "wgmma_xchg"  # small: as before
    assert registry.resolve("auto", "cuda", heads=128, tokens=512) == "wgmma_f16_2cta"
    assert registry.resolve("auto", "cuda", heads=128, tokens=2047) == "wgmma_f16_2cta"
    assert registry.resolve("auto", "cuda", heads=128, tokens=2048) == "wgmma_f16_2cta"  # 2**18, rows not known long
    assert registry.resolve("auto", "cuda", heads=128, tokens=2049) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=4 * 1024 - 1) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=4 * 2048 - 1) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=128, tokens=4 * 2048) == "wgmma_xchg"  # 2**20: b4 topk2048
    assert registry.resolve("auto", "cuda", heads=128, tokens=16 * 512, queries=16) == "wgmma_xchg"
    assert registry.resolve("auto", "cuda", heads=128, tokens=4 * 2048 + 1) == "wgmma_ws_h64"
    assert registry.resolve("auto", "cuda", heads=128, tokens=64 * 2048) == "wgmma_ws_h64"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (12, 0))
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 2048, queries=64) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 2048) == "portable_ws_h32t"  # queries unknown
    assert registry.resolve("auto", "cuda", heads=16, tokens=4 * 512) == "portable_ws"  # sm_120: no wgmma
    # > 32 heads, by head-tokens: the 16-head groups below 2**18, the 32-head groups on their own plan (P as a pair)
    # below 2**19, the same plan in f16 below 2**22 at any topk and up to 2**23 at 2048 tokens a query, then the
    # 32-head groups on the nominal plan
    assert registry.resolve("auto", "cuda", heads=64, tokens=512) == "portable_ws"
    assert registry.resolve("auto", "cuda", heads=64, tokens=4095) == "portable_ws"
    assert registry.resolve("auto", "cuda", heads=64, tokens=4096) == "portable_ws_h32p"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8191) == "portable_ws_h32p"
    assert registry.resolve("auto", "cuda", heads=64, tokens=8192) == "portable_ws_h32f"  # 2**19: queries unknown
    assert registry.resolve("auto", "cuda", heads=40, tokens=8 * 2048) == "portable_ws_h32f"  # 2**19.3
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 1024 - 1) == "portable_ws_h32f"  # any topk
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 512, queries=64) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=64, tokens=131072, queries=64) == "portable_ws_h32f"  # 2**23
    # ... from 2**22 rung 26 for calls of 2048 tokens a query, else rung 24 (b128 topk512: 7.6% faster at c8e518c)
    assert registry.resolve("auto", "cuda", heads=64, tokens=64 * 1024) == "portable_ws_h32t"  # queries unknown
    assert registry.resolve("auto", "cuda", heads=64, tokens=128 * 512, queries=128) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=64, tokens=32 * 2048, queries=33) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=64, tokens=131073) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=128, tokens=2047) == "portable_ws"
    assert registry.resolve("auto", "cuda", heads=128, tokens=2048) == "portable_ws_h32p"
    assert registry.resolve("auto", "cuda", heads=128, tokens=4095) == "portable_ws_h32p"
    assert registry.resolve("auto", "cuda", heads=128, tokens=4096) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=128, tokens=32767) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=128, tokens=65536, queries=32) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=128, tokens=65536, queries=128) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=128, tokens=65537) == "portable_ws_h32t"  # b64 topk2048: 2**24
    assert registry.resolve("auto", "cuda", heads=33, tokens=64 * 2048, queries=64) == "portable_ws_h32f"
    assert registry.resolve("auto", "cuda", heads=20, tokens=8 * 2048) == "portable_ws_h32t"
    # <= 16 heads: portable_ws, but the one padded 32-head group from 8192 tokens
    assert registry.resolve("auto", "cuda", heads=16, tokens=8192 - 1) == "portable_ws"
    assert registry.resolve("auto", "cuda", heads=16, tokens=8192) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=9, tokens=8 * 2048) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=16, tokens=8 * 2048 + 1) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=1, tokens=64 * 2048) == "portable_ws_h32t"
    assert registry.resolve("auto", "cuda", heads=1, tokens=4096) == "portable_ws"
    assert registry.resolve("auto", "cuda", heads=128, tokens=64 * 2048) == "portable_ws_h32t"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 9))  # no warp specialisation
    assert registry.resolve("auto", "cuda", heads=16, tokens=64 * 2048) == "tile512"
    assert registry.resolve("auto", "cuda", heads=64, tokens=512) == "tile512"


def test_auto_portable_provider_records_what_auto_runs_without_wgmma():
    from workbench.bench.sweeps import BenchShape, sweep_shapes
    assert "auto_portable" in bench.provider_names()
    assert bench.kernel_of("auto_portable", BenchShape(64, 16, 2048)) == "portable_ws_h32t"
    assert bench.kernel_of("auto_portable", BenchShape(1, 64, 512)) == "portable_ws"
    assert bench.kernel_of("auto_portable", BenchShape(64, 128, 2048)) == "portable_ws_h32t"
    assert bench.kernel_of("auto_portable", BenchShape(8, 64, 2048)) == "portable_ws_h32f"
    assert bench.kernel_of("auto_portable", BenchShape(2, 64, 2048)) == "portable_ws_h32p"
    # the extra scope's tokens count: 8 x 512 alone is below the 16-head threshold, 8 x (512 + 512) is on it
    assert bench.kernel_of("auto_portable", BenchShape(8, 16, 512)) == "portable_ws"
    assert bench.kernel_of("auto_portable", BenchShape(8, 16, 512, extra_topk=512)) == "portable_ws_h32t"
    for sweep in ("headline", "ladder", "crossover"):
        assert all("auto_portable" in provs for _, provs, _, _ in sweep_shapes(sweep)), sweep


# the sweeps auto_kernel's (sm_90) and portable_kernel's (sm_120) docstrings cite for the rule as it stands, and the
# margins they claim
RULE_TABLES = {"sm_90": ("bench_h100_80gb_hbm3_20261208-0018_crossover.csv",
                         "bench_h100_80gb_hbm3_20261208-0019_heads.csv"),
               "sm_120": ("bench_h200_20261205-1812_crossover.csv", "bench_h200_20261205-1815_heads.csv")}
# (batch, heads, topk): the pick's time over the fastest Hopper rung's where over 2% in either table
# (docs/decisions.md): b4 h128 topk2048 at 90799f7, wgmma_xchg 21.73 us against rung 15's 21.20 (1.8% at e44d2e2);
# b1 h128 topk2048, 4.5% there under the rule before (rung 26 against rung 25), is rung 25's own time
HOPPER_MARGINS = {(4, 128, 2048): 1.025}
# (batch, heads, topk): the pick's time over the fastest portable rung's where over 0.5% in either table
# (docs/decisions.md)
PORTABLE_MARGINS = {(1, 64, 2048): 1.019, (1, 128, 2048): 1.006, (4, 64, 512): 1.007, (4, 128, 512): 1.008,
                    (8, 32, 512): 1.008, (16, 32, 512): 1.013}
HOPPER = ("wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta", "wgmma_ws", "wgmma_ws_h64", "wgmma_ws_bal", "portable_ws_h32t",
          "portable_ws_h32p", "portable_ws_h32f")
PORTABLE = ("tile512", "portable_ws", "portable_ws_h32q", "portable_ws_h32t", "portable_ws_h32p", "portable_ws_h32f")


DEFAULT_MARGINS = {"sm_90": 1.020, "sm_120": 1.005}  # the pick's time over the fastest rung's, unless listed


def _pick_ratios(table: str) -> dict:
    """(arch, batch, heads, topk) -> the time of the rung the rule picks there over the fastest rung's time, among
    the Hopper rungs ("sm_90") and the portable ones ("sm_120"), in one committed sweep (graph replay), for each
    shape whose pick is timed by name (a call of two scopes: topk is the main scope's, the rule gets both). The
    caller keeps the arch whose rule cites the table."""
    import pandas as pd

    from workbench.report.results import find_table
    df = pd.read_csv(find_table(table))
    df = df[(df["mode"] == "graph") & (df.status == "ok")]
    ratios = {}
    for (b, s_q, h, k, xk), g in df.groupby(["batch", "s_q", "heads", "topk", "extra_topk"]):
        t = g.groupby("provider").median_us.median()
        queries = int(b * s_q)
        for arch, rungs in (("sm_90", HOPPER), ("sm_120", PORTABLE)):
            pick = registry.auto_kernel(arch, heads=int(h), tokens=queries * int(k + xk), queries=queries,
                                        scopes=2 if xk else 1)
            if pick in t:
                assert (arch, b, h, k) not in ratios, (table, arch, b, h, k)  # one shape a key
                ratios[arch, b, h, k] = t[pick] / t[[r for r in rungs if r in t]].min()
    return ratios


@pytest.mark.parametrize("arch,table", [(a, t) for a, tables in RULE_TABLES.items() for t in tables])
def test_the_rule_is_within_its_documented_margin_in_the_tables_it_cites(arch, table):
    """What the docstrings and docs/decisions.md claim of the committed sweeps: on sm_90 the pick within 2% of the
    fastest Hopper rung at every shape but those HOPPER_MARGINS names (each with its own bound); off it within 0.5%
    of the fastest portable rung at every shape with more than 16 heads but those PORTABLE_MARGINS names, and at 16
    heads within 2% everywhere. Every rung is timed by name in these sweeps. A new rule or new tables must update
    the docstrings and this test."""
    rule = {"sm_90": registry.auto_kernel, "sm_120": registry.portable_kernel}[arch]
    assert table in rule.__doc__
    margins = {"sm_90": HOPPER_MARGINS, "sm_120": PORTABLE_MARGINS}[arch]
    for (a, b, h, k), ratio in _pick_ratios(table).items():
        if a != arch:
            continue
        bound = 1.02 if arch == "sm_120" and h <= 16 else margins.get((b, h, k), DEFAULT_MARGINS[arch])
        assert ratio <= bound, (arch, b, h, k, ratio)
    assert all(m > DEFAULT_MARGINS[arch] for m in margins.values()), margins  # no entry a stale one


PRODUCTION_TABLE = "bench_h100_80gb_hbm3_20261208-0022_production.csv"  # the rungs by name at 16, 64 and 128 heads
# (heads, batch): the pick's time over the fastest Hopper rung's where over 3%: b1 and b4 h16, 8.4-8.7 us calls of
# 8192 tokens at most, where wgmma_xchg and wgmma_f16 trade places run to run (wgmma_f16 0.960-1.042x wgmma_xchg's
# time at b1-b8 h16 in the six H100 production tables since 2026-12-07)
PRODUCTION_MARGINS = {(16, 1): 1.031, (16, 4): 1.043}


def test_the_two_scope_rule_is_within_3_percent_in_the_production_table():
    """The production sweep times the Hopper rungs by name on calls of two scopes (topk 128 + extra 512, b1-b132, 16,
    64 and 128 heads; every rung at 16 heads and up to b8, from b16 at 64 and 128 heads the four the rule picks among
    there, sweeps.TWO_SCOPE_HOPPER_RUNGS): the sm_90 rule's pick is within 3% of the fastest timed, at every one of
    the 27 shapes, but where PRODUCTION_MARGINS says (each needed: over 3%), in the table the docstring cites. The
    step this holds up is rung 15 at 16 heads from JOINED_MIN_TOKENS_H16 (b64: 26.93 us against the two-block rung's
    28.04; b128 38.15 against wgmma_ws's 45.27)."""
    assert PRODUCTION_TABLE in registry.auto_kernel.__doc__
    ratios = {(h, b): r for (a, b, h, k), r in _pick_ratios(PRODUCTION_TABLE).items() if a == "sm_90"}
    assert sorted({h for h, _ in ratios}) == [16, 64, 128] and len(ratios) == 27  # no pick without its by-name row
    assert sorted(b for h, b in ratios if h == 16) == [1, 2, 4, 8, 16, 32, 64, 128, 132]
    for key, ratio in ratios.items():
        assert ratio <= PRODUCTION_MARGINS.get(key, 1.03), (key, ratio)
    assert all(ratios[key] > 1.03 for key in PRODUCTION_MARGINS), PRODUCTION_MARGINS  # no entry a stale one
    assert max(ratios[16, b] for b in (64, 128, 132)) <= 1.0 + 1e-9  # rung 15 the fastest where the step sends it


def test_every_margin_listed_is_needed():
    """Each shape HOPPER_MARGINS or PORTABLE_MARGINS names misses the default margin in one of the tables the rule
    cites (so a margin the next sweeps no longer need is dropped, not kept silently)."""
    for arch, margins in (("sm_90", HOPPER_MARGINS), ("sm_120", PORTABLE_MARGINS)):
        ratios = [_pick_ratios(table) for table in RULE_TABLES[arch]]
        for (b, h, k) in margins:
            worst = max(r.get((arch, b, h, k), 0.0) for r in ratios)
            assert worst > DEFAULT_MARGINS[arch], (arch, b, h, k, worst)


@pytest.mark.parametrize("heads", [20, 32, 40, 64])
def test_the_one_split_query_count_is_where_wgmma_f16s_plan_becomes_one_split(heads):
    """ONE_SPLIT_MIN_QUERIES_SM90 is not a tuned number: from it on, wgmma_f16's own split plan on the H200's 132 SMs
    is one split at every topk (so the call runs no combine), and one query fewer it is two; at 65-128 heads (two
    64-head groups a query) one split starts earlier, at 45 queries, which the rule does not use."""
    from workbench import decode
    spec, n = registry.get("wgmma_f16"), registry.ONE_SPLIT_MIN_QUERIES_SM90

    def splits(queries, h, topk):
        return decode.spec_split_plans(spec, queries=queries, heads=h, topks=[topk], num_sms=132)[0].num_splits
    for topk in (512, 2048):
        assert splits(n, heads, topk) == 1 and splits(n - 1, heads, topk) == 2, topk
        assert splits(45, 128, topk) == 1 and splits(44, 128, topk) == 2
