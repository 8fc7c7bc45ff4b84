"""Resource lab, Gluon: the catalog's Gluon rungs are lab kernels that compile through GluonASTSource with their
entry's compile options (wgmma_f16_2cta's maxnreg=128 reaches ptxas), and are skipped, not compiled, off sm_90."""
import dataclasses
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from workbench import registry
from workbench.kernels import wgmma
from workbench.lab.resources import lab_kernels, to_frame, without_interpreter

# wgmma_f16_2cta as registered (its lab signature types the page stride "i64:16", as a launch specialises it:
# typed plainly, the gathers compile to 1-8 byte loads in the lab), and the same entry without its register cap
CAPPED, UNCAPPED, LOWCAP, BASE = "wgmma_f16_2cta", "lab_gluon_probe_nocap", "lab_gluon_probe_cap96", "wgmma_xchg"
LOW_CAP = 96  # below what the rung takes uncapped: ptxas must obey it
H16 = {"BLOCK_H": 16, "BLOCK_T": 64, "num_warps": 8}


def register_probes():
    registry.register(dataclasses.replace(registry.get(CAPPED), name=UNCAPPED, rung=None, compile_options={}))
    registry.register(dataclasses.replace(registry.get(CAPPED), name=LOWCAP, rung=None,
                                          compile_options={"maxnreg": LOW_CAP}))


def unregister_probes():
    registry.unregister(UNCAPPED)
    registry.unregister(LOWCAP)


@pytest.fixture
def probes():
    register_probes()
    try:
        yield lab_kernels()
    finally:
        unregister_probes()


def test_every_gluon_rung_is_a_lab_kernel_with_its_register_cap():
    """The catalog registers each Gluon rung for the lab: its compile options are the launcher's (maxnreg only
    where the rung caps registers), its switches are table columns."""
    lk = lab_kernels()
    gluon = [n for n in registry.names("split") if registry.get(n).jit is wgmma.wgmma_partial_kernel]
    assert {"wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta"} == set(gluon) and set(gluon) <= set(lk)
    caps = {n: lk[n].compile_options for n in gluon}
    assert caps["wgmma_f16_2cta"] == {"maxnreg": 128} and caps["wgmma_f16"] == caps["wgmma_xchg"] == {}
    assert lk["wgmma_f16"].fixed_meta["F16"] == 1 and lk["wgmma_xchg"].fixed_meta["F16"] == 0


def test_a_gluon_entry_is_a_lab_kernel_with_its_options_and_defaults(probes):
    from workbench.kernels.configs import TiledConfig
    probe, base = probes[CAPPED], probes[BASE]
    assert probes[UNCAPPED].compile_options == {}  # the capped entry's: the test above
    # the rungs' switches are the lab's constexprs and table columns
    assert base.fixed_meta == dict(F16=0, K_BUFFERS=2)
    assert probe.fixed_meta == dict(F16=1, K_BUFFERS=1)
    assert [c.label for c in probe.configs] == ["BLOCK_H=16,BLOCK_T=64,num_warps=8,num_stages=1"]
    assert probe.constexprs(TiledConfig(**H16))["K_BUFFERS"] == 1


def test_a_gluon_rung_compiles_for_sm90_with_its_register_cap():
    """wgmma_f16_2cta at BLOCK_H=16: HGMMA, 88 KB of shared memory (one K buffer), 128 registers with the maxnreg
    its entry's compile_options carry; a probe capped at 96 gets at most 96 where the uncapped one takes more, so
    the cap reaches ptxas; skipped, not compiled, for sm_120."""
    setup = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_resources_gluon as t; "
             "t.register_probes()")
    code = (f"{setup}\nimport json; from workbench.lab.resources import compile_config\n"
            f"res = [compile_config(k, a, {H16!r}) for k, a in "
            f"(({CAPPED!r}, 'sm_90'), ({UNCAPPED!r}, 'sm_90'), ({CAPPED!r}, 'sm_120'), ({LOWCAP!r}, 'sm_90'))]\n"
            "print(json.dumps([r.as_row() for r in res]))")
    rows = to_frame(json.loads(without_interpreter(code).splitlines()[-1]))
    capped, uncapped, off, low = (r for _, r in rows.iterrows())
    for r in (capped, uncapped):
        assert r.status == "fits", r.reason
        assert r.mma == "HGMMA" and r.mma_count == r.hgmma > 0 and r.hmma == 0
        assert r.num_warps == 8 and r.K_BUFFERS == 1 and r.F16 == 1
        assert 80000 <= r.shared_bytes <= 90000 and r.shared_bytes <= r.model_shared_bytes  # 88,192 B compiled
        assert r.ld_global_16B > 0
    assert uncapped.spill_stores == 0 and uncapped.spill_loads == 0 and uncapped.registers > 128
    # at the cap ptxas spills (204 B of stores, sm_90 lab, Triton 3.6): three stores before the f16 loop and one
    # after it, the rest in the bf16 rerun that only a split outside the f16 window takes; the f16 loop itself
    # holds no local load or store
    assert capped.registers == 128
    assert low.status == "fits" and low.registers <= LOW_CAP < uncapped.registers, "maxnreg did not reach ptxas"
    assert off.status == "compile_error" and off.reason.startswith("skipped: Gluon sm_90 kernel")
    assert pd.isna(off.registers)


def _ptx_ops(ptx: str) -> list[str]:
    """The PTX's barrier, shared-store, global-store, wgmma-wait and griddepcontrol opcodes, in order (a guard
    predicate dropped)."""
    words = [ln.split() for ln in ptx.splitlines() if ln.strip() and not ln.lstrip().startswith("//")]
    ops = [w[1] if w[0].startswith("@") and len(w) > 1 else w[0] for w in words]
    keep = ("bar.sync", "st.shared", "st.global", "wgmma.wait_group", "griddepcontrol")
    return [op.rstrip(";") for op in ops if op.startswith(keep)]


@pytest.mark.parametrize("kernel", ["wgmma_f16_2cta", "wgmma_f16"])
def test_the_loop_keeps_k_safe_and_the_combine_launches_after_it(kernel):
    """sm_90 PTX. One K buffer (wgmma_f16_2cta): the loop's first wgmma wait retires this warpgroup's last PV,
    but the other warpgroup's PV reads K too (its half of the output columns, every token) and each thread
    stores every column of its tokens, so a CTA barrier must come between that wait and the K stores (Triton's
    membar pass puts one there too; the kernel writes it out). Every Gluon rung signals the combine's launch
    (griddepcontrol.launch_dependents) once, after the first pass's MMA waits (the f16 rungs' bf16 second pass,
    taken only for a cache outside the f16 window, comes after it) and before it writes its partials."""
    code = ("from workbench.lab.resources import compiled_ptx\n"
            f"print(compiled_ptx({kernel!r}, 'sm_90', {H16!r}))")
    ops = _ptx_ops(without_interpreter(code))
    waits = [i for i, op in enumerate(ops) if op.startswith("wgmma.wait_group")]
    if kernel == "wgmma_f16_2cta":
        first_store = next(i for i in range(waits[0], len(ops)) if ops[i].startswith("st.shared"))
        assert "bar.sync" in ops[waits[0] + 1:first_store], ops[waits[0]:first_store + 1]
    signal = [i for i, op in enumerate(ops) if op == "griddepcontrol.launch_dependents"]
    first_global_store = next(i for i, op in enumerate(ops) if op.startswith("st.global"))
    assert len(signal) == 1 and waits[0] < signal[0] < first_global_store
    assert ops[signal[0] - 1].startswith("wgmma.wait_group"), "the signal must follow the loop's last MMA wait"


WS = {"BLOCK_H": 16, "BLOCK_T": 64, "num_warps": 4}


def _ptx_sync_ops(ptx: str) -> list[str]:
    """The PTX's shared stores, async-proxy fences, barriers, mbarrier waits and arrives and wgmma waits, in order."""
    keep = ("st.shared", "fence.proxy.async", "bar.sync", "mbarrier.try_wait", "mbarrier.arrive", "wgmma.wait_group")
    words = [ln.split() for ln in ptx.splitlines() if ln.strip() and not ln.lstrip().startswith("//")]
    ops = [w[1] if w[0].startswith("@") and len(w) > 1 else w[0] for w in words]
    return [op.rstrip(";") for op in ops if op.startswith(keep)]


def test_wgmma_ws_hands_each_slot_over_behind_its_partitions_barrier():
    """sm_90 PTX of rung 13. Gluon's mbarrier.arrive is one thread's, so each partition must sync its own warps
    before it: the producer's K and valid stores, then the async-proxy fence (the consumer's wgmma reads K), then
    its partition barrier, then "full" (fails with the fence removed); the consumer's "empty" comes after its wgmma
    wait (the PV that read the slot retired) and a partition barrier, which the softmax's cross-warp reductions
    already provide (so this does not fail with the consumer's explicit barrier removed, nor check which slot is
    handed back). Two arrive sites in each of the kernel's two warp-specialised regions (the f16 pass and its bf16
    rerun), and the producer gets its 152 registers."""
    code = ("from workbench.lab.resources import compiled_ptx\n"
            f"print(compiled_ptx('wgmma_ws', 'sm_90', {WS!r}))")
    ptx = without_interpreter(code)
    ops = _ptx_sync_ops(ptx)
    arrives = [i for i, op in enumerate(ops) if op.startswith("mbarrier.arrive")]
    assert len(arrives) == 4, ops
    kinds = []
    for a in arrives:
        since = ops[max((i for i in range(a) if ops[i].startswith("mbarrier.try_wait")), default=-1) + 1:a]
        wait = next((i for i, op in enumerate(since) if op.startswith("wgmma.wait_group")), None)
        if wait is None:  # the producer's: no MMA of its own
            last_store = max(i for i, op in enumerate(since) if op.startswith("st.shared"))
            tail = since[last_store + 1:]
            fence = next(i for i, op in enumerate(tail) if op.startswith("fence.proxy.async"))
            assert any(op.startswith("bar.sync") for op in tail[fence + 1:]), since
            kinds.append("full")
        else:  # the consumer's
            assert any(op.startswith("bar.sync") for op in since[wait + 1:]), since
            kinds.append("empty")
    assert sorted(kinds) == ["empty", "empty", "full", "full"]
    assert "setmaxnreg.inc.sync.aligned.u32 \t152" in ptx or "setmaxnreg.inc.sync.aligned.u32 152" in ptx


def test_wgmma_ws_is_registered_as_rung_13_with_its_block_per_sm():
    from workbench.kernels import wgmma_ws
    from workbench.kernels.configs import TiledConfig
    spec = registry.get("wgmma_ws")
    assert spec.rung == 13 and spec.split_waves == 1 and spec.pdl and not spec.interpretable
    assert spec.compile_options == {"maxnreg": 168} == {"maxnreg": wgmma_ws.register_cap(4, 8)}
    assert wgmma_ws.register_cap(8, 8) == 128  # 16 warps: 65536 registers over 512 threads
    c = TiledConfig(**WS)
    assert spec.shared_model(c) == 215808  # the lab's compiled bytes (data/resources_sm_90.csv)
    # two slots: 2 * (64 KB tile + 64 valid bytes + 16 B of barriers) + 16 KB q + 2 KB P + 512 B, to 128 B
    assert wgmma_ws.estimate_shared_bytes(c, NUM_BUFS=2) == 150272
    with pytest.raises(TypeError):
        wgmma_ws.estimate_shared_bytes(c, NUM_BUFFS=2)


def test_rung_16_keeps_its_wgmmas_pipelined():
    """ptxas serialises every wgmma of a kernel (C7515) when a non-wgmma instruction writes an accumulator inside
    a pipeline stage; it then puts a WARPGROUP.DEPBAR behind each HGMMA. Rung 16's zero-trip loop edge did that
    (144 HGMMA, 144 DEPBAR, sm_90 lab, Triton 3.6); with its zeros passed through a wait the waits are the
    kernel's own (12), far fewer than its HGMMAs."""
    code = ("import re; from workbench.lab.resources import compiled_sass\n"
            "sass = compiled_sass('wgmma_ws_bal', 'sm_90', {'BLOCK_H': 64, 'BLOCK_T': 64, 'num_warps': 4})\n"
            "print(len(re.findall(r'\\bHGMMA\\b', sass)), len(re.findall(r'WARPGROUP\\.DEPBAR', sass)))")
    hgmma, depbar = map(int, without_interpreter(code).split()[-2:])
    assert hgmma > 100, hgmma
    assert depbar < hgmma // 4, f"{depbar} DEPBAR for {hgmma} HGMMA: ptxas serialised the wgmmas"


@pytest.mark.parametrize("direct", [False, True], ids=["partials", "one_split"])
@pytest.mark.parametrize("pf_ahead", [1, 2], ids=["one_head_group", "two_head_groups"])
def test_rung_15s_f16_loops_read_little_local_memory(pf_ahead, direct):
    """Rung 15 (wgmma_ws_h64) runs its f16 pass in three loops, one a partition (sm_90 SASS, innermost loops of
    ``workbench.lab.sass_loops``): the PV warpgroup's and the softmax warpgroup's (f16 HGMMA: ``.F32`` without
    ``.BF16``) and the producer's (gathers and f16 converts, F2FP). The two consumer loops touch no local memory.
    When the bf16 rerun loaded q in the f16 pass's layout, LLVM kept those addresses for it and the softmax and
    producer loops each reloaded a spilled value every tile (one LDL each); the rerun's own loops may still spill
    (it is rare). The producer's loop spilled a little once it asked L2 for the next tile (5 LDL and 1 STL a
    tile at 112 registers, of ~710 instructions): measured so, the call took 0.92x its time at b64 h64 topk2048
    (data/explore/README.md, the L2 prefetch), so more than that is what this test catches. Since its next half
    tile's gathers are issued as soon as a half is stored, it has 128 registers (at 112 that order spilled 26 LDL
    and 18 STL a tile): no local memory at one tile ahead in the lab. Both builds the launcher
    picks (wgmma_ws_h64.prefetch_ahead: L2 asked one tile ahead, or two at more than one head group and splits of
    512 tokens or more) are checked. The second keeps the next tile's indices in registers (a one-deep queue, so
    each index tile is loaded once): 5 LDL and 4 STL a tile in the lab at 3c5ed47's patch, measured 0.97-0.99x the
    time of loading them twice (data/explore/explore_h100_20261206-0836_split_bound_index_queue_rule.csv), so its
    bound is 4 stores. A call of one split (DIRECT) stages its output in the K slots; with the PV warpgroup reading
    its half back and writing it out itself, the producer's loop spilled 4 LDL and 4 STL a tile at one tile ahead
    and 11 and 11 at two, so the default warps write both halves and the bounds are the same for both builds.
    The PV warpgroup stages q in a loop of its own in each pass, with no local memory (as a loop in the softmax
    warpgroup, ptxas spilled that warpgroup's q descriptors: 28 LDL a tile of its f16 loop); since then the f16
    producer's loop has 1 LDL and 1 STL a tile at one tile ahead (0 and 0 before), and 6 and 6 in the build with
    an attention sink and DIRECT, which this test does not build."""
    code = ("import json; from workbench.lab.resources import compiled_sass\n"
            "print(json.dumps(compiled_sass('wgmma_ws_h64', 'sm_90', {'BLOCK_H': 64, 'BLOCK_T': 64, 'num_warps': 4},"
            f" DIRECT={direct}, PF_AHEAD={pf_ahead})))")
    from workbench.lab import sass_loops
    sass = json.loads(without_interpreter(code).splitlines()[-1])

    def f16(lp):
        hgmma = [t for _, t in lp.body if sass_loops.opcode(t) == "HGMMA"]
        if hgmma:
            return all(".F32 " in t and ".BF16" not in t for t in hgmma)
        return lp.count("LDG") > 0 and lp.count("F2FP") > 0

    found = [lp for lp in sass_loops.innermost(sass_loops.loops(sass)) if lp.count("HGMMA") or lp.count("LDG")]
    # each pass's q staging (gluon_common.stage_q): q's loads and no mbarrier, no local memory
    staging = [lp for lp in found if not lp.count("HGMMA") and not lp.count("SYNCS")]
    assert len(staging) == 2, [(hex(lp.first), len(lp.body)) for lp in staging]
    assert [(hex(lp.first), lp.count("LDL"), lp.count("STL")) for lp in staging
            if lp.count("LDL") or lp.count("STL")] == []
    loops = [lp for lp in found if lp not in staging]
    f16_loops = [lp for lp in loops if f16(lp)]
    assert len(loops) == 6 and len(f16_loops) == 3, [(hex(lp.first), lp.opcodes()) for lp in loops]
    consumers = [lp for lp in f16_loops if lp.count("HGMMA")]
    producer = next(lp for lp in f16_loops if not lp.count("HGMMA"))
    assert len(consumers) == 2
    assert [(hex(lp.first), lp.count("LDL"), lp.count("STL")) for lp in consumers
            if lp.count("LDL") or lp.count("STL")] == []
    stores = 1 if pf_ahead == 1 else 4
    assert producer.count("LDL") <= 5 and producer.count("STL") <= stores, (producer.count("LDL"),
                                                                             producer.count("STL"))



@pytest.mark.parametrize("direct", [False, True], ids=["partials", "one_split"])
@pytest.mark.parametrize("pf_ahead", [1, 2], ids=["one_head_group", "two_head_groups"])
def test_rung_15s_joined_build_keeps_its_f16_loops_out_of_local_memory(pf_ahead, direct):
    """Rung 15 over two scopes joined (JOINED, the extra scope in pages of 64, the producer at the 144 registers
    wgmma_ws_h64.producer_regs gives it): the f16 pass's producer runs one loop a scope, and both stay within the
    one-scope build's bounds (the test above); the consumers' f16 loops touch no local memory. At 128 registers
    the two producer loops spilled 14 and 10 LDL a tile at one tile ahead (7 and 8 at two; lab), and the
    production shape took 1.04-1.10x the time of 144 on an H100
    (data/explore/explore_h100_20261207-1743_joined_scopes.csv)."""
    from workbench.kernels import wgmma_ws_h64
    from workbench.lab import sass_loops
    regs = wgmma_ws_h64.producer_regs(direct, False, joined=True)
    code = ("import json; from workbench.lab.resources import compiled_sass\n"
            "print(json.dumps(compiled_sass('wgmma_ws_h64', 'sm_90', {'BLOCK_H': 64, 'BLOCK_T': 64, 'num_warps': 4},"
            f" DIRECT={direct}, PF_AHEAD={pf_ahead}, JOINED=True, X_BS_SHIFT=6, PRODUCER_REGS={regs})))")
    sass = json.loads(without_interpreter(code).splitlines()[-1])
    found = [lp for lp in sass_loops.innermost(sass_loops.loops(sass)) if lp.count("HGMMA") or lp.count("LDG")]
    f16_mma = [lp for lp in found if lp.count("HGMMA") and all(
        ".F32 " in t and ".BF16" not in t for _, t in lp.body if sass_loops.opcode(t) == "HGMMA")]
    # the f16 pass's producer loops: gathers and the f16 pair converts (F2FP), then the f16 dequant's HMUL2
    producers = [lp for lp in found if not lp.count("HGMMA") and lp.count("LDG") and lp.count("F2FP")
                 and lp.count("HMUL2")]
    assert len(f16_mma) == 2 and len(producers) == 2, [(hex(lp.first), lp.opcodes()) for lp in found]
    assert [(hex(lp.first), lp.count("LDL"), lp.count("STL")) for lp in f16_mma
            if lp.count("LDL") or lp.count("STL")] == []
    stores = 1 if pf_ahead == 1 else 4
    assert all(lp.count("LDL") <= 5 and lp.count("STL") <= stores for lp in producers), [
        (hex(lp.first), lp.count("LDL"), lp.count("STL")) for lp in producers]

def _cta_barriers_in_called_functions(ptx: str) -> dict[str, int]:
    """Per ``.func`` of a PTX module: its ``bar.sync`` / ``barrier.sync`` with no thread count (the whole CTA's)."""
    found, name, count = {}, None, 0
    for ln in ptx.splitlines():
        head = re.match(r"\s*(?:\.(?:visible|weak|extern)\s+)*\.(func|entry)\b", ln)
        if head:
            if name is not None:
                found[name] = count
            name, count = (ln.strip() if head.group(1) == "func" else None), 0
        elif name is not None and re.match(r"\s*(?:@!?%p\d+\s+)?(?:bar|barrier)\.sync(?:\.aligned)?\s+[^,;]+;", ln):
            count += 1
    if name is not None:
        found[name] = count
    return {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("kernel,cfg", [("wgmma_ws", WS), ("wgmma_ws_h64", {"BLOCK_H": 64, "BLOCK_T": 64,
                                                                              "num_warps": 4})],
                         ids=["rung_13", "rung_15"])
def test_no_called_function_holds_a_whole_cta_barrier(kernel, cfg):
    """sm_90 PTX of the warp-specialised rungs (rung 15 in the build the loop test compiles first, so it is the
    same compile). Inline code in a partition syncs its own warps (``bar.sync id, 128``); a barrier inside a called
    (``noinline``) function is Triton's whole-CTA ``bar.sync 0`` with no count, which waits for warps that are in
    another partition or parked at the join: the in-launch merges of data/explore's 1730, 1900 and 2050 patches would
    all have hung at every two-split call (found by a review of their PTX before they ran, docs/decisions.md). So a
    called function may hold loads, arithmetic and stores, and no barrier, scalar atomic, reduction or cross-warp
    layout change (each of which lowers to a barrier)."""
    code = ("from workbench.lab.resources import compiled_ptx\n"
            f"print(compiled_ptx({kernel!r}, 'sm_90', {cfg!r}"
            + (", DIRECT=False, PF_AHEAD=1" if kernel == "wgmma_ws_h64" else "") + "))")
    ptx = without_interpreter(code)
    assert ".entry" in ptx and "bar.sync" in ptx
    assert _cta_barriers_in_called_functions(ptx) == {}


H64 = {"BLOCK_H": 64, "BLOCK_T": 64, "num_warps": 4}


@pytest.mark.parametrize("kernel,cfg,halves,more", [("wgmma_ws", WS, 1, {}), ("wgmma_ws_h64", H64, 2, {}),
                                                    ("wgmma_ws_h64", H64, 2, {"PF_AHEAD": 2})],
                         ids=["rung_13", "rung_15", "rung_15_two_tiles_ahead"])
def test_each_producer_loop_issues_its_l2_prefetches(kernel, cfg, halves, more):
    """sm_90 SASS of each pass's producer loop (the loops with gathers, LDG, and no HGMMA) of the two warp-specialised
    defaults: the four per-thread L2 prefetches of gluon_common.prefetch_tile_l2 (``CCTL.E.PF2``, PTX
    ``prefetch.global.L2``) a tile of BLOCK_T tokens or of each half of one, and no bulk prefetch (``UBLKPF``: its
    address is uniform, and ptxas walked the warp's lanes through it one at a time). It counts them: which tile they
    ask for (a tile ahead of its gathers; rung 13, the tile after the one in flight; rung 15 at two head groups, two
    tiles ahead) is the code's, not tested here; the count over the whole kernel says the distance reached both
    passes (rung 15's prologue, which gathers the first tile, asks for the PF_AHEAD tiles after it). Three builds:
    the two warp-specialised defaults and rung 15's build for two head groups."""
    code = ("import json; from workbench.lab.resources import compiled_sass\n"
            f"print(json.dumps(compiled_sass({kernel!r}, 'sm_90', {cfg!r}, DIRECT=True, **{more!r})))")
    from workbench.lab import sass_loops
    sass = json.loads(without_interpreter(code).splitlines()[-1])
    producers = [lp for lp in sass_loops.innermost(sass_loops.loops(sass))  # (rung 15's q staging: no mbarrier)
                 if lp.count("LDG") and not lp.count("HGMMA") and lp.count("SYNCS")]
    assert len(producers) == 2, [(hex(lp.first), len(lp.body)) for lp in producers]  # the f16 pass, the bf16 rerun
    for lp in producers:
        assert sum("CCTL.E.PF2" in t for _, t in lp.body) == 4 * halves, hex(lp.first)
    assert "UBLKPF" not in sass
    # PF_AHEAD reaches both passes' producers: rung 15's prologue gathers the first tile and asks L2 for the d tiles
    # after it (its loop then asks for tile i + 1 + d while it gathers tile i + 1), so each pass holds
    # 4 * halves * (1 + d) prefetches in all (outside its loop as well as in it)
    d = more.get("PF_AHEAD", 1 if kernel == "wgmma_ws_h64" else 2)
    before_loop = d if kernel == "wgmma_ws_h64" else 0
    assert sass.count("CCTL.E.PF2") == 2 * 4 * halves * (1 + before_loop), sass.count("CCTL.E.PF2")


@pytest.mark.parametrize("kernel,cfg", [("wgmma_ws", WS), ("wgmma_ws_h64", {"BLOCK_H": 64, "BLOCK_T": 64,
                                                                            "num_warps": 4})],
                         ids=["rung_13", "rung_15"])
def test_the_softmax_loop_hands_the_last_slot_back_and_reads_valid_bytes_before_qk(kernel, cfg):
    """sm_90 SASS of the f16 pass's consumer loop that runs QK (the innermost loop with the most HGMMA): the last
    slot's "empty" arrive and the valid bytes' shared loads come before the tile's first HGMMA, and the loop's
    wgmma waits are its own (two: the last PV's, then QK's), not one behind each HGMMA. ncu's source counters at
    877f643 had the arrive after the softmax and the loads after QK's wait (docs/decisions.md, "The consumer's
    chain at b64 h128"); ptxas sinks an arrive placed between QK's issue and its wait past the softmax."""
    code = ("import json; from workbench.lab.resources import compiled_sass\n"
            f"print(json.dumps(compiled_sass({kernel!r}, 'sm_90', {cfg!r}, DIRECT=True)))")
    from workbench.lab import sass_loops
    sass = json.loads(without_interpreter(code).splitlines()[-1])
    f16 = [lp for lp in sass_loops.innermost(sass_loops.loops(sass))
           if lp.count("HGMMA") and not any(".BF16" in t for _, t in lp.body)]
    loop = max(f16, key=lambda lp: lp.count("HGMMA"))
    ops = [(sass_loops.opcode(t), t) for _, t in loop.body]
    first_mma = next(i for i, (op, _) in enumerate(ops) if op == "HGMMA")
    before = [op for op, _ in ops[:first_mma]]
    assert "LDS" in before, "the valid bytes are read after QK"
    assert any(op == "SYNCS" and "ARRIVE" in t for op, t in ops[:first_mma]), "the slot goes back after QK"
    assert sum("WARPGROUP.DEPBAR" in t for _, t in ops) == 2, [t for _, t in ops if "DEPBAR" in t]
