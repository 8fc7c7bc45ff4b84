"""The portable rung (portable_ws, issue 24): wgmma_ws's schedule from instructions sm_120 has. The resource lab
compiles it on the CPU: for sm_120 and sm_90 it fits in sm_120's shared memory per block with no spills and its
SASS has HMMA (mma.sync) and no HGMMA or UTCMMA; for sm_89, where warp specialisation aborts LLVM, the lab reports
a compile_error from a child process instead of dying. Its PTX hands each ring slot over only behind a barrier of
the partition that used it. (Its numbers on a GPU: the GPU checks, which run every registered kernel.)"""
import json

import pytest

from workbench import registry
from workbench.kernels import portable_ws
from workbench.kernels.configs import TiledConfig
from workbench.lab.resources import (CHILD_ABORT, arch_skip_reason, compiles_in_child, declared_archs, gluon_archs,
                                 lab_kernels, without_interpreter)
from workbench.lab.targets import get_target

NAME = "portable_ws"
CFG = {"BLOCK_H": 16, "BLOCK_T": 32, "num_warps": 4}
SM120_SHARED = get_target("sm_120").smem_per_block  # 101,376 B


def test_portable_ws_is_registered_as_a_gpu_only_split_rung():
    spec = registry.get(NAME)
    assert spec.kind == "split" and spec.rung == 14 and not spec.interpretable and spec.pdl
    assert spec.rung == registry.get("wgmma_ws").rung + 1  # it carries rung 13's schedule off Hopper
    assert spec.split_granule == 32 and spec.split_waves == 2  # whole 32-token tiles; 2 blocks an SM on sm_90
    assert "tile512" in spec.prediction and "wgmma_ws" in spec.prediction and spec.summary
    assert spec.fixed_meta == portable_ws.SWITCHES == dict(NUM_BUFS=2, PRODUCER_WARPS=4, PRODUCER_REGS=96)
    assert spec.compile_options == {"maxnreg": portable_ws.MAXNREG} == {"maxnreg": 65536 // (2 * 8 * 32)}
    assert [spec.check_config(c) for c in spec.check_configs] == [TiledConfig(**CFG)]
    assert NAME in registry.decode_impls() and NAME in registry.compiled_kernels()
    # the shared-memory model (the lab's compiled 84,180 B and never below it: tests/test_resources.py) fits sm_120
    model = spec.shared_model(TiledConfig(**CFG))
    assert 84180 <= model <= SM120_SHARED
    # three slots of 32 tokens would not fit sm_120: why the ring has two
    assert portable_ws.estimate_shared_bytes(TiledConfig(**CFG), NUM_BUFS=3) > SM120_SHARED
    with pytest.raises(TypeError):
        portable_ws.estimate_shared_bytes(TiledConfig(**CFG), NUM_BUF=2)


def test_the_lab_compiles_it_everywhere_and_off_its_targets_in_a_child():
    """The portable kernel declares its targets; the lab compiles it in its own process there and in a child
    process elsewhere (sm_89); the wgmma Gluon rungs keep their skip off sm_90."""
    lk = lab_kernels()
    port, ws = lk[NAME], lk["wgmma_ws"]
    assert declared_archs(port) == gluon_archs(port) == ("sm_90", "sm_100", "sm_120")
    assert declared_archs(ws) is None and gluon_archs(ws) == ("sm_90",)
    for arch in ("sm_120", "sm_100", "sm_90", "sm_89"):
        assert arch_skip_reason(port, arch) is None
        assert compiles_in_child(port, arch) == (arch == "sm_89")
        assert not compiles_in_child(ws, arch)
    assert arch_skip_reason(ws, "sm_120").startswith("skipped: Gluon sm_90 kernel")
    assert arch_skip_reason(lk["tile512"], "sm_89") is None and not compiles_in_child(lk["tile512"], "sm_89")


# ----------------------------------------------------------------------------- compiled (one child process)

@pytest.fixture(scope="module")
def portable_lab():
    """Lab rows for sm_120, sm_90 and sm_89 and the sm_120 PTX, from one process without the interpreter."""
    code = ("import json; from workbench.lab.resources import compile_config, compiled_ptx\n"
            f"rows = [compile_config({NAME!r}, a, {CFG!r}).as_row() for a in ('sm_120', 'sm_90', 'sm_89')]\n"
            f"ptx = compiled_ptx({NAME!r}, 'sm_120', {CFG!r})\n"
            "print(json.dumps(dict(rows=rows, ptx=ptx)))")
    out = json.loads(without_interpreter(code).splitlines()[-1])
    return {r["arch"]: r for r in out["rows"]}, out["ptx"]


@pytest.mark.parametrize("arch", ["sm_120", "sm_90"])
def test_it_compiles_with_hmma_only_no_spills_and_fits_sm120(portable_lab, arch):
    r = portable_lab[0][arch]
    assert r["status"] == "fits", r["reason"]
    assert r["mma"] == "HMMA" and r["hmma"] == r["mma_count"] > 0 and r["hgmma"] == 0 and r["utcmma"] == 0
    # per tile and warp: QK 32 HMMA (16 heads x 8 tokens, 512 deep) and PV 32 (16 x 128 columns, 32 tokens deep)
    assert r["hmma"] == 64
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0
    assert r["shared_bytes"] <= SM120_SHARED and r["shared_bytes"] <= r["model_shared_bytes"]
    assert r["registers"] <= portable_ws.MAXNREG
    assert r["num_warps"] == 4 and r["NUM_BUFS"] == 2 and r["PRODUCER_WARPS"] == 4
    # occupancy counts the block's 8 warps (4 consumer + 4 producer): one block on sm_120 (shared memory), two on
    # sm_90 (registers)
    blocks = {"sm_120": 1, "sm_90": 2}[arch]
    assert r["blocks_per_sm"] == blocks and r["warps_per_sm"] == 8 * blocks and r["occupancy"] > 0
    assert r["ld_global_16B"] > 0


def test_sm89_is_reported_not_crashed(portable_lab):
    """Warp specialisation needs setmaxnreg, which sm_89 lacks: LLVM aborts the child compile, and the lab's row
    says so in one line."""
    r = portable_lab[0]["sm_89"]
    assert r["status"] == "compile_error" and r["reason"].startswith(CHILD_ABORT), r["reason"]
    assert "setmaxnreg" in r["reason"] and "\n" not in r["reason"]
    assert r["registers"] is None and r["model_shared_bytes"] > 0


def _ops(ptx: str) -> list[str]:
    keep = ("st.shared", "ld.shared", "ldmatrix", "bar.sync", "mbarrier.try_wait", "mbarrier.arrive")
    words = [ln.split() for ln in ptx.splitlines() if ln.strip() and not ln.lstrip().startswith("//")]
    ops = [w[1] if w[0].startswith("@") and len(w) > 1 else w[0] for w in words]
    return [op.rstrip(";") for op in ops if op.startswith(keep)]


def test_each_slot_goes_back_behind_its_partitions_barrier(portable_lab):
    """sm_120 PTX. Gluon's mbarrier.arrive is one thread's, so each partition syncs its own warps first: the
    producer's last shared store of a tile (K, valid bytes) comes before a barrier that comes before "full"; the
    consumer's last shared read of a slot (ldmatrix of K, the scores) before a barrier before "empty". mma.sync
    only: no wgmma, no async-proxy fence, no tcgen05."""
    ptx = portable_lab[1]
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx
    assert "wgmma" not in ptx and "fence.proxy.async" not in ptx and "tcgen05" not in ptx
    ops = _ops(ptx)
    arrives = [i for i, op in enumerate(ops) if op.startswith("mbarrier.arrive")]
    assert len(arrives) == 2, ops  # the consumer's "empty" and the producer's "full"
    kinds = []
    for a in arrives:
        since = ops[max(i for i in range(a) if ops[i].startswith("mbarrier.try_wait")) + 1:a]
        last_access = max(i for i, op in enumerate(since) if op.startswith(("st.shared", "ld.shared", "ldmatrix")))
        assert any(op.startswith("bar.sync") for op in since[last_access + 1:]), since
        kinds.append("full" if since[last_access].startswith("st.shared") else "empty")
    assert sorted(kinds) == ["empty", "full"]
    # the producer runs at PRODUCER_REGS, the consumer at the rest of the block's 8 x 128
    assert "setmaxnreg.inc.sync.aligned.u32 \t96" in ptx or "setmaxnreg.inc.sync.aligned.u32 96" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 \t160" in ptx or "setmaxnreg.dec.sync.aligned.u32 160" in ptx


# ----------------------------------------------------------------------------- the 32-head group (rung 20)

H32 = "portable_ws_h32q"
CFG_H32 = {"BLOCK_H": 32, "BLOCK_T": 32, "num_warps": 4}


def test_portable_ws_h32q_is_registered_as_rung_20_in_place_of_rung_17():
    spec = registry.get(H32)
    assert spec.kind == "split" and spec.rung == 20 and not spec.interpretable and spec.pdl
    assert "portable_ws_h32" not in registry.names()  # rung 17: its 1 x 4 QK is gone from the kernel
    assert spec.split_granule == 32 and spec.split_waves == 1  # one block an SM: the 32-head accumulator
    assert spec.fixed_meta == portable_ws.SWITCHES
    assert spec.compile_options == {"maxnreg": portable_ws.MAXNREG_H32}
    assert [spec.check_config(c) for c in spec.check_configs] == [TiledConfig(**CFG_H32)]
    assert spec.prediction and "b64 h64" in spec.prediction and spec.summary
    # the consumer's exchange is P in bf16 (2 B a head-token) and a row's partial max: smaller than h16's fp32
    # scores per head, so 32 heads still fit sm_120: the model, never below the committed lab row's compiled bytes
    import pandas as pd

    from workbench.report.results import DATA
    lab = pd.read_csv(DATA / "resources_sm_120.csv")
    compiled = int(lab[(lab.kernel == H32) & (lab.config == TiledConfig(**CFG_H32).label)].shared_bytes.iloc[0])
    model = spec.shared_model(TiledConfig(**CFG_H32))
    assert compiled <= model <= SM120_SHARED
    assert H32 in registry.decode_impls() and H32 in registry.compiled_kernels()


@pytest.fixture(scope="module")
def portable_h32_lab():
    code = ("import json; from workbench.lab.resources import compile_config\n"
            f"print(json.dumps([compile_config({H32!r}, a, {CFG_H32!r}).as_row() for a in ('sm_120', 'sm_90')]))")
    return {r["arch"]: r for r in json.loads(without_interpreter(code).splitlines()[-1])}


@pytest.mark.parametrize("arch", ["sm_120", "sm_90"])
def test_h32_compiles_with_hmma_only_no_spills_and_fits_sm120(portable_h32_lab, arch):
    r = portable_h32_lab[arch]
    assert r["status"] == "fits", r["reason"]
    assert r["mma"] == "HMMA" and r["hgmma"] == 0 and r["utcmma"] == 0
    assert r["hmma"] == 128  # twice h16's 64: two 16-row MMA tiles for each of QK and PV
    # the 2 x 2 QK left 2-3 words a thread on the stack, stored before the loop and loaded after it (SASS, lab);
    # more than that is a new spill
    assert r["spill_stores"] <= 24 and r["spill_loads"] <= 12 and r["stack_bytes"] <= 16
    assert r["shared_bytes"] <= SM120_SHARED and r["shared_bytes"] <= r["model_shared_bytes"]
    assert r["registers"] <= portable_ws.MAXNREG_H32
    assert r["blocks_per_sm"] == 1 and r["warps_per_sm"] == 8
