"""Resource lab: cross-compiles on a CPU-only machine; plausibility; model vs compiler; occupancy by hand;
load widths by hand; a kernel registered once appears in the lab, the bench and the CLI."""
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import triton
import triton.language as tl

from workbench import registry
from workbench.kernels.configs import KernelConfig
from workbench.registry import KernelSpec
from workbench.lab.resources import (CHILD_ABORT, apply_model, compiles_in_child, gluon_archs, is_gluon, lab_frame,
                                 lab_kernels, ptx_memory_counts)
from workbench.lab.targets import TARGETS, get_target

ROOT = Path(__file__).resolve().parents[1]
PROBE = {"BLOCK_H": 64, "BLOCK_T": 16, "num_warps": 8, "num_stages": 1, "PREFETCH": 0}
MMA_KIND = {"sm_90": "HGMMA", "sm_100": "UTCMMA", "sm_120": "HMMA", "sm_89": "HMMA"}


@pytest.mark.parametrize("arch", list(TARGETS))
def test_one_config_per_target_compiles_with_plausible_numbers(arch):
    r = lab_frame(arch, "mma", [PROBE]).iloc[0]
    assert r.status in ("fits", "over_limit"), r.reason
    assert r.shared_bytes > 0 and 0 < r.registers <= 255
    assert r.num_warps == 8 and r.num_stages == 1 and r.PREFETCH == 0 and r.config == (
        "BLOCK_H=64,BLOCK_T=16,PREFETCH=0,num_warps=8,num_stages=1")
    assert r.mma == MMA_KIND[arch], f"{arch}: expected {MMA_KIND[arch]} in the SASS, got {r.mma}"
    assert r.mma_count > 0 and r.mma_count == r[MMA_KIND[arch].lower()]
    assert r.ld_global > 0 and 1 <= r.ld_global_avg_bytes <= 16
    assert r.ld_global == sum(r[f"ld_global_{w}B"] for w in (1, 2, 4, 8, 16)) + r.ld_global_other
    if r.status == "fits":
        assert r.blocks_per_sm >= 1 and r.warps_per_sm == r.blocks_per_sm * 8


def test_model_prune_agrees_with_compiler_on_sm120():
    df = lab_frame("sm_120", "mma", [{"BLOCK_H": 16, "BLOCK_T": 16, "num_warps": 4, "num_stages": 1, "PREFETCH": 1},
                                     {"BLOCK_H": 64, "BLOCK_T": 32, "num_warps": 8, "num_stages": 1, "PREFETCH": 0}])
    small, big = df.iloc[0], df.iloc[1]
    limit = get_target("sm_120").smem_per_block
    assert small.status == "fits" and small.shared_bytes <= limit
    assert big.status == "over_limit" and big.shared_bytes > limit and big.model_shared_bytes > limit


def test_occupancy_by_hand():
    # 255 regs -> 8160 per warp, allocated in units of 256 -> 8192; 8 warps -> 65536 = the whole file: 1 block
    occ = get_target("sm_90").occupancy(num_warps=8, regs_per_thread=255, shared_bytes=131072)
    assert occ["blocks_per_sm"] == 1 and occ["warps_per_sm"] == 8 and occ["limiter"] == "registers"
    # 40 regs -> 1280 per warp; 4 warps: 65536 // 5120 = 12 blocks; shared 37376+1024: 233472 // 38400 = 6 blocks
    occ = get_target("sm_90").occupancy(num_warps=4, regs_per_thread=40, shared_bytes=37376)
    assert occ["blocks_per_sm"] == 6 and occ["limiter"] == "shared_memory" and occ["warps_per_sm"] == 24
    assert get_target("sm_120").occupancy(num_warps=8, regs_per_thread=64, shared_bytes=131072)["blocks_per_sm"] == 0


def test_unknown_arch():
    with pytest.raises(ValueError, match="arch"):
        get_target("sm_75")


def test_ptx_counts_by_hand():
    ptx = """
	// begin inline asm
	mov.u32 %r1, 0x0;
	@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
	// end inline asm
	@!%p2 ld.global.L1::evict_last.b16 { %rs1 }, [ %rd2 + 0 ];
	ld.global.nc.v2.b32 { %r5, %r6 }, [ %rd3 ];
	ld.shared.v4.b32 { %r7, %r8, %r9, %r10 }, [ %r11 ];
	cp.async.cg.shared.global [ %r12 + 0 ], [ %rd4 + 0 ], 0x10, %r13;
	@%p3 cp.async.ca.shared.global [ %r14 + 0 ], [ %rd5 + 0 ], 4;
"""
    c = ptx_memory_counts(ptx)
    assert (c["ld_global_16B"], c["ld_global_2B"], c["ld_global_8B"], c["ld_global"]) == (1, 1, 1, 3)
    assert c["ld_global_avg_bytes"] == pytest.approx((16 + 2 + 8) / 3, abs=1e-3)
    assert c["cp_async"] == 2 and c["cp_async_avg_bytes"] == 10.0


# ----------------------------------------------------------------------------- the committed tables

def _committed(arch):
    return pd.read_csv(ROOT / "data" / f"resources_{arch}.csv")


SIMT_MODEL = ("simt.estimate_simt_shared_bytes counts only the tl.sum reductions (4*BLOCK_T*num_warps B, at most "
              "2 KB) while Triton 3.6 compiles 8 KB and more; its pruning never bites at these sizes, but the model "
              "is not a bound (simt.py is not the lab's to change)")


def _model_kernels():
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=SIMT_MODEL)) if n == "simt" else n
            for n, lk in lab_kernels().items() if lk.shared_model is not None]


def _expected_error(kernel, arch):
    """Configs that cannot compile for a target, by design: a wgmma Gluon kernel off GLUON_ARCHS, which the lab skips
    (resources.arch_skip_reason), and a portable Gluon kernel off the targets it declares, whose child compile
    aborts (resources.compiles_in_child: warp specialisation on sm_89)."""
    lk = lab_kernels()[kernel]
    if compiles_in_child(lk, arch):
        return CHILD_ABORT
    return "skipped: Gluon sm_90 kernel" if is_gluon(lk) and arch not in gluon_archs(lk) else None


@pytest.mark.parametrize("kernel", _model_kernels())
def test_committed_lab_tables_never_underestimated_by_the_model(kernel):
    """Every lab kernel's whole config space is in each committed table, compiled; the current model (recomputed by
    apply_model) is never below the compiled shared bytes and never on the other side of a per-block limit."""
    lk = lab_kernels()[kernel]
    want = {c.label for c in lk.configs}
    for arch in TARGETS:
        df = _committed(arch)
        rows = apply_model(df[df.kernel == kernel])
        assert set(rows.config) == want and len(rows) == len(want), f"{arch}: {kernel}'s configs are not all there"
        errors = rows[rows.status == "compile_error"]
        expected = _expected_error(kernel, arch)
        if expected:
            assert len(errors) == len(rows) and errors.reason.str.contains(expected, regex=False).all()
            continue
        assert errors.empty, errors[["config", "reason"]]
        under = rows[rows.model_shared_bytes < rows.shared_bytes]
        cols = ["config", "model_shared_bytes", "shared_bytes"]
        assert under.empty, f"{arch}: the model underestimates\n{under[cols]}"
        limit = get_target(arch).smem_per_block
        wrong = rows[(rows.model_shared_bytes > limit) != (rows.shared_bytes > limit)]
        assert wrong.empty, f"{arch}: the model prunes configs that fit\n{wrong[cols]}"
        assert ((rows.registers > 0) & (rows.registers <= 255)).all()


def test_committed_tables_have_the_ladder_columns():
    """tile512: cp.async gathers exactly when pipelined (Triton 3.6 issues them from 2 stages on, not only from 3);
    the ladder's columns; provenance columns."""
    for arch in TARGETS:
        df = _committed(arch)
        assert {"triton", "git_commit", "date", "config", "mma", "registers", "shared_bytes", "model_shared_bytes",
                "status", "spill_stores", "warps_per_sm", "limiter", "ld_global_avg_bytes", "cp_async",
                "mma_count"} <= set(df.columns)
        t = df[(df.kernel == "tile512") & (df.status != "compile_error")]
        assert len(t) and ((t.cp_async > 0) == (t.num_stages >= 2)).all(), (
            f"{arch}: cp.async unpipelined, or pipelined without")
        assert (df[df.status != "compile_error"].ld_global_avg_bytes > 0).all()


def test_apply_model_reads_old_and_new_config_cells():
    old = "{'BLOCK_H': 16, 'BLOCK_T': 32, 'PREFETCH': 1, 'num_warps': 4, 'num_stages': 1}"
    new = "BLOCK_H=16,BLOCK_T=32,PREFETCH=1,num_warps=4,num_stages=1"
    df = pd.DataFrame([dict(kernel="mma", arch="sm_120", config=c, status="fits", reason="fits",
                            model_shared_bytes=0) for c in (old, new)])
    got = apply_model(df)
    assert got.model_shared_bytes.iloc[0] == got.model_shared_bytes.iloc[1] > 0


def test_tile512_model_per_target():
    """The pipelined gathers buffer a tile of raw bytes per stage; with no target given the model bounds them all."""
    from workbench.kernels import tile512
    from workbench.kernels.configs import TiledConfig
    c = TiledConfig(BLOCK_H=16, BLOCK_T=32, num_warps=4, num_stages=3)
    assert tile512.estimate_shared_bytes(c, "sm_90") == 131328  # the compiled number on sm_90 (issue 9)
    assert tile512.estimate_shared_bytes(c) == max(tile512.estimate_shared_bytes(c, a) for a in TARGETS)
    # BLOCK_H=64, BLOCK_T=64, 2 stages fits sm_90 (wgmma takes K from shared memory once) but not as mma.sync
    wide = TiledConfig(BLOCK_H=64, BLOCK_T=64, num_warps=8, num_stages=2)
    assert tile512.prune_reason(wide, 64, get_target("sm_90"))[1] is None
    assert "shared memory" in tile512.prune_reason(wide, 64, get_target("sm_120"))[1]
    spec = registry.get("tile512")
    for arch in (None, *TARGETS):
        assert spec.shared_model(c, arch=arch) == tile512.estimate_shared_bytes(c, arch)


# ----------------------------------------------------------------------------- one registration

@triton.jit
def toy_copy(src, dst, row, BLOCK: tl.constexpr):
    """Each program copies BLOCK contiguous fp8 bytes from byte row*pid: BLOCK / (32 * num_warps) per thread."""
    offs = tl.program_id(0) * row + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs))


@dataclass(frozen=True)
class ToyConfig(KernelConfig):
    BLOCK: int = 2048


# 4 warps = 128 threads: 2048 bytes are 16 per thread (one 16-byte load), 512 bytes are 4 (one 4-byte load)
TOY = KernelSpec(name="toy_copy", kind="probe", summary="test-only: copies fp8 bytes", jit=toy_copy,
                 config_cls=ToyConfig, allowed=dict(BLOCK=(512, 2048), num_warps=(4,), num_stages=(1,)),
                 config_space=(ToyConfig(BLOCK=2048), ToyConfig(BLOCK=512)), shared_model=lambda c: 0,
                 lab_signature=dict(src="*fp8e4nv", dst="*fp8e4nv", row="i32:16"), lab_constexprs=lambda c: c.meta())
# the same kernel with a row stride the compiler cannot assume to be a multiple of 16
TOY_PLAIN = KernelSpec(**{**TOY.__dict__, "name": "toy_copy_plain",
                          "lab_signature": dict(src="*fp8e4nv", dst="*fp8e4nv", row="i32")})


def test_adding_a_kernel_is_one_registration():
    from workbench import __main__ as cli
    from workbench import bench
    from workbench.lab import resources
    registry.register(TOY)
    try:
        assert "toy_copy" in registry.compiled_kernels()
        assert "toy_copy" in resources.KERNELS
        assert {k for k, _, _ in resources.sweep_jobs("sm_90", "all")} >= {"toy_copy", "mma", "tile512", "combine"}
        assert "toy_copy" in bench.provider_names()
        sub = next(a for a in cli.parser()._actions if a.dest == "cmd").choices["resources"]
        assert "toy_copy" in next(a for a in sub._actions if "--kernel" in a.option_strings).choices
        # and the lab compiles it, in its own process (no interpreter), after the same one registration
        setup = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_resources as t; "
                 "from workbench import registry; registry.register(t.TOY)")
        df = lab_frame("sm_90", "toy_copy", setup=setup).set_index("BLOCK")
    finally:
        registry.unregister("toy_copy")
    assert "toy_copy" not in registry.names() and registry.names("probe") == ("gather", "gather_async")
    assert list(df.config) == ["BLOCK=2048,num_warps=4,num_stages=1", "BLOCK=512,num_warps=4,num_stages=1"]
    assert (df.status == "fits").all() and (df.mma == "none").all() and (df.cp_async == 0).all()
    # 16 contiguous fp8 bytes per thread from a 16-byte-aligned address (row "i32:16"): one ld.global.v4.b32
    assert df.loc[2048, "ld_global_16B"] == 1 and df.loc[2048, "ld_global"] == 1
    assert df.loc[2048, "ld_global_avg_bytes"] == 16.0
    assert df.loc[512, "ld_global_4B"] == 1 and df.loc[512, "ld_global"] == 1


@triton.jit
def toy_switched(src, dst, OTHER: tl.constexpr, FLAG: tl.constexpr = 7):
    """A kernel with two switches, one of them defaulted: only its signature is read (never compiled here)."""
    tl.store(dst + tl.program_id(0), tl.load(src + tl.program_id(0)) + FLAG + OTHER)


def test_a_siblings_switch_becomes_a_column_at_the_launch_default():
    """A switch that a sibling entry of the same jit function pins but this entry does not is a constexpr and a
    table column of this entry too, at the value a launch that omits it gets: the parameter's default, else 0."""
    from workbench.lab.resources import _from_spec
    base = dict(kind="probe", summary="test-only", jit=toy_switched, config_cls=ToyConfig,
                config_space=(ToyConfig(BLOCK=512),), lab_signature=dict(src="*fp32", dst="*fp32"),
                lab_constexprs=lambda c: {})
    pinned = KernelSpec(name="toy_pinned", fixed_meta=dict(FLAG=1, OTHER=3), **base)
    plain = KernelSpec(name="toy_plain", **base)
    assert _from_spec(plain, [pinned, plain]).fixed_meta == dict(FLAG=7, OTHER=0)
    assert _from_spec(plain, [pinned, plain]).constexprs(ToyConfig()) == dict(FLAG=7, OTHER=0)
    assert _from_spec(pinned, [pinned, plain]).fixed_meta == dict(FLAG=1, OTHER=3)
    assert _from_spec(plain, [plain]).fixed_meta == {}


def test_an_unaligned_integer_narrows_the_loads():
    """The lab compiles an integer typed plainly "i32" unspecialised: with row*pid of unknown alignment the same
    copy becomes byte loads, which is why launch strides that are multiples of 16 are typed "i32:16"."""
    setup = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_resources as t; "
             "from workbench import registry; registry.register(t.TOY_PLAIN)")
    r = lab_frame("sm_90", "toy_copy_plain", [{"BLOCK": 2048, "num_warps": 4}], setup=setup).iloc[0]
    assert r.ld_global_16B == 0 and r.ld_global_1B == r.ld_global == 16 and r.ld_global_avg_bytes == 1.0
