"""The gather floor by bulk copies: can the TMA unit land the selected tokens in shared memory faster than the
threads' loads do?

Issue 25 asks that "floor" mean what sm_90 can gather by its best load path, and names bulk copies into shared memory
as one to measure; the published probes (``gather``, ``gather_fine``: 16-byte loads xor-reduced in registers, and
``gather_async``: 16-byte ``cp.async``) never tried it. This probe does: each selected token is two non-tensor bulk
copies (``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes``, SASS ``UBLKCP``), its 576 data bytes
and the 16-byte-aligned chunk holding its 8 scale bytes (its own and a neighbour's: the chunk is the smallest a bulk
copy moves), into a ring of ``NUM_BUFS`` slots of ``BLOCK_T`` tokens (592 bytes a token) that completes on one
mbarrier a slot. Every lane of the program's one warp arrives once a token on the slot's barrier, with the bytes of
its copies as the transaction count (0 for an invalid token, which copies nothing), so a slot's phase completes when
all of its tokens have landed. Nothing reads the slots in a timed launch: the probe's time is the time to land the
bytes, which is what a producer built on bulk copies would start from (it would then dequantise from shared memory).

The grid is the floor probes' own: ``--split-tokens N`` programs of N tokens a query (64: ``gather_fine``'s grid),
or 0 for the decode's split plan. Each program walks its tokens in tiles of ``BLOCK_T``, up to ``NUM_BUFS`` tiles in
flight. Shared memory is one allocation that the kernel addresses itself (its offset 0 is ``global_smem``): the
slots, then one 8-byte mbarrier a slot.

``--check`` first runs every variant in its CHECK build (after each slot lands, the warp xors the words of its valid
tokens, 144 data words and the token's 2 scale words, as the ``gather`` probe does in registers) and compares each
program's word with ``gather``'s on the same grid: an independent reader of the same bytes. A variant that fails has
no time. Timing is the bench's (graph replay over rotated index sets, L2 cold as the bench's floor rows), beside
``gather_fine`` and ``gather`` on the same grid in the same process; counted bytes are the bench's (584 a token).

Needs sm_90 and 16-byte aligned rows: page sizes of an even number of tokens (a page is 584 bytes a token), which
every bench shape has; an odd page size is refused before anything runs.

    python scripts/bulk_gather_probe.py --compile-only                  # CPU: sm_90a SASS counts of each build
    python scripts/bulk_gather_probe.py --check --csv $OUT/bulk.csv     # GPU: check, then time
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402

from workbench.bench.providers import ProbeProvider  # noqa: E402
from workbench.format.layout import MODEL1  # noqa: E402
from workbench.kernels.gluon_common import load_idx, token_pages, token_rows  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the shared::cta address of global_smem, and one mbarrier try_wait on a shared::cta address
from cluster_share_probe import _smem_base, _try_wait  # noqa: E402

DATA = MODEL1.data_bytes_per_token    # 576
SCALE = MODEL1.scale_bytes_per_token  # 8
TOKEN = DATA + 16                     # a token's bytes in a slot: its data, then the 16-byte chunk of its scales


def token_bytes(scale_copy: bool) -> int:
    """A token's bytes in a slot: its data, and with scale_copy the 16-byte chunk of its scales after them."""
    return TOKEN if scale_copy else DATA


# name -> (BLOCK_T, NUM_BUFS, the scale bytes by a second bulk copy); one warp a program, so BLOCK_T is a multiple
# of 32 (a lane owns BLOCK_T // 32 tokens).
# Triton allocates shared memory in powers of two, so each variant fills its allocation (64 or 128 KB: 3 or 1
# programs an SM) with as many slots as fit, or takes one slot (32 or 64 KB: 6 or 3 programs an SM)
# "bulk1_*": one bulk copy a token (its data bytes), the 8 scale bytes loaded by the lane into registers instead: is
# the TMA unit's rate of requests the limit (two a token), or its bytes?
VARIANTS = {"bulk_t32_b1": (32, 1, True), "bulk_t32_b3": (32, 3, True), "bulk_t32_b6": (32, 6, True),
            "bulk_t64_b1": (64, 1, True), "bulk_t64_b3": (64, 3, True), "bulk1_t32_b1": (32, 1, False),
            "bulk1_t32_b3": (32, 3, False), "bulk1_t64_b1": (64, 1, False)}


# ----------------------------------------------------------------------------- inline PTX

@gluon.jit
def _init_barriers(bar0, NUM_BUFS: gl.constexpr, COUNT: gl.constexpr):
    """Lane 0 initialises NUM_BUFS mbarriers of COUNT arrivals at bar0, bar0 + 8, ...; then the init is made
    visible to the async proxy, which completes the copies' bytes on them."""
    for b in gl.static_range(NUM_BUFS):
        gl.inline_asm_elementwise("""{
            .reg .pred p;
            .reg .u32 t;
            mov.u32 t, %tid.x;
            setp.eq.u32 p, t, 0;
            @p mbarrier.init.shared::cta.b64 [$1], $2;
            mov.u32 $0, 0;
            }""", "=r,r,r", [bar0 + 8 * b, COUNT], dtype=gl.int32, is_pure=False, pack=1)
    gl.inline_asm_elementwise("fence.mbarrier_init.release.cluster;\nmov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)
    gl.thread_barrier()


@gluon.jit
def _globaltimer():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _wait(addr, phase):
    """Spin until the barrier's phase ``phase`` completes; trap after 2 s (a protocol error ends the launch with a
    CUDA error instead of hanging the device call; a healthy wait takes microseconds)."""
    done = _try_wait(addr, phase, False)
    t0 = _globaltimer()
    while done == 0:
        done = _try_wait(addr, phase, False)
        if _globaltimer() - t0 > 2000000000:
            gl.inline_asm_elementwise("trap;\nmov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


def _token_asm(scale_copy: bool) -> str:
    """One token: arrive on the slot's barrier with its bytes as the transaction count, then its bulk copies (an
    invalid token arrives with none and copies nothing). Operands: $1 slot row, $2 data bytes, $3 barrier, then with
    scale_copy $4 the scale chunk, $5 valid, $6 the row's scale place; else $4 valid (the data bytes only)."""
    valid, nbytes = ("$5", TOKEN) if scale_copy else ("$4", DATA)
    scale = ("    @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$6], [$4], 16, [$3];\n"
             if scale_copy else "")
    return ("{\n    .reg .pred p;\n"
            f"    setp.ne.b32 p, {valid}, 0;\n"
            f"    @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$3], {nbytes};\n"
            "    @!p mbarrier.arrive.shared::cta.b64 _, [$3];\n"
            f"    @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$1], [$2], {DATA}, [$3];\n"
            f"{scale}    mov.u32 $0, 0;\n    }}")


_TOKEN_ASM = gl.constexpr(_token_asm(True))
_DATA_ASM = gl.constexpr(_token_asm(False))


@gluon.jit
def _ld_shared_v4(addr):
    return gl.inline_asm_elementwise("ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r", [addr],
                                     dtype=(gl.int32, gl.int32, gl.int32, gl.int32), is_pure=False, pack=1)


@gluon.jit
def _ld_shared_v2(addr):
    return gl.inline_asm_elementwise("ld.shared.v2.u32 {$0, $1}, [$2];", "=r,=r,r", [addr],
                                     dtype=(gl.int32, gl.int32), is_pure=False, pack=1)


# ----------------------------------------------------------------------------- the kernel

@gluon.constexpr_function
def _pow2_at_least(n):
    return 1 << (int(n) - 1).bit_length()


@gluon.jit
def _tile_tokens(idx_row, cache_u8, t0, end, num_tokens, stride_page, block_size, TL: gl.constexpr,
                 BLOCK_T: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr):
    """(valid, data, scale chunk, scale byte's place in its chunk) [BLOCK_T] of tokens [t0, t0 + BLOCK_T): the
    producers' own index and row arithmetic (any page size: divisions); a token's 16-byte scale chunk starts 8 bytes
    before its scale bytes when its slot in the page is odd (a page's scale bytes start 16-byte aligned)."""
    idx = load_idx(idx_row, t0, end, BLOCK_T, TL)
    valid, page, off = token_pages(idx, t0, end, num_tokens, block_size, BLOCK_T, TL, -1)
    data, scale = token_rows(page, off, stride_page, block_size, DATA_BYTES, SCALE_BYTES)
    half = (off % 2).to(gl.int32)
    return valid, cache_u8 + data, cache_u8 + scale - half * 8, half


@gluon.jit
def _xor_landed(slot, valid, half, BLOCK_T: gl.constexpr, TL: gl.constexpr, TOKEN_BYTES: gl.constexpr,
                DATA_BYTES: gl.constexpr, SCALE_COPY: gl.constexpr):
    """CHECK build: the xor of every landed word of the slot's valid tokens (each lane its own tokens), as the
    ``gather`` probe reduces its loads: data words, then (SCALE_COPY) the token's two scale words."""
    t = gl.arange(0, BLOCK_T, layout=TL)
    row = slot + t * TOKEN_BYTES
    acc = t * 0
    for c in range(DATA_BYTES // 16):
        a, b, c2, d = _ld_shared_v4(row + c * 16)
        acc ^= a ^ b ^ c2 ^ d
    if SCALE_COPY:
        s0, s1 = _ld_shared_v2(row + DATA_BYTES + half * 8)
        acc ^= s0 ^ s1
    return gl.where(valid, acc, 0)


@gluon.jit
def bulk_gather_kernel(cache_u8, stride_page, block_size, num_tokens, idx_ptr, stride_ib, stride_is, sink_ptr, S_Q,
                       TOPK, tokens_per_split, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
                       TOKEN_BYTES: gl.constexpr, BLOCK_T: gl.constexpr, NUM_BUFS: gl.constexpr, CHECK: gl.constexpr,
                       SCALE_COPY: gl.constexpr):
    SLOT: gl.constexpr = BLOCK_T * TOKEN_BYTES
    TL: gl.constexpr = gl.BlockedLayout([BLOCK_T // 32], [32], [1], [0])
    gl.static_assert(gl.num_warps() == 1, "one warp a program: every lane arrives for its own tokens")
    gl.static_assert(BLOCK_T % 32 == 0, "BLOCK_T: a multiple of 32 (no lane may hold another lane's token)")
    split = gl.program_id(0)
    pid_q = gl.program_id(1)
    idx_row = idx_ptr + (pid_q // S_Q) * stride_ib + (pid_q % S_Q) * stride_is
    start = split * tokens_per_split
    end = gl.minimum(start + tokens_per_split, TOPK)

    # the probe's one shared allocation (offset 0: global_smem): NUM_BUFS slots, then a barrier a slot. The kernel
    # reaches it only through PTX: zeroing its last 128 bytes (unused) keeps Triton from dropping it, and the
    # keep-alive at the end from placing any scratch over it
    WORDS: gl.constexpr = _pow2_at_least((NUM_BUFS * SLOT + 8 * NUM_BUFS) // 4 + 32)  # Triton's shapes: powers of 2
    smem = gl.allocate_shared_memory(gl.int32, [WORDS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    smem.slice(WORDS - 32, 32).store(gl.zeros([32], gl.int32, gl.BlockedLayout([1], [32], [1], [0])))
    gl.thread_barrier()
    base = _smem_base()
    bar0 = base + NUM_BUFS * SLOT
    _init_barriers(bar0, NUM_BUFS, BLOCK_T)

    acc = gl.zeros([BLOCK_T], gl.int32, TL)
    n_tiles = gl.cdiv(end - start, BLOCK_T)
    for j in range(n_tiles + NUM_BUFS):
        buf = j % NUM_BUFS
        if j >= NUM_BUFS:  # the tile issued NUM_BUFS ago into this slot has landed: the slot is free again
            _wait(bar0 + 8 * buf, ((j - NUM_BUFS) // NUM_BUFS) & 1)
            if CHECK:
                valid, data, scale, half = _tile_tokens(idx_row, cache_u8, start + (j - NUM_BUFS) * BLOCK_T, end,
                                                        num_tokens, stride_page, block_size, TL, BLOCK_T, DATA_BYTES,
                                                        SCALE_BYTES)
                acc ^= _xor_landed(base + buf * SLOT, valid, half, BLOCK_T, TL, TOKEN_BYTES, DATA_BYTES, SCALE_COPY)
                # the generic-proxy reads above before the async proxy writes the slot again
                gl.inline_asm_elementwise("fence.proxy.async.shared::cta;\nmov.u32 $0, 0;", "=r", [],
                                          dtype=gl.int32, is_pure=False, pack=1)
        if j < n_tiles:
            valid, data, scale, half = _tile_tokens(idx_row, cache_u8, start + j * BLOCK_T, end, num_tokens,
                                                    stride_page, block_size, TL, BLOCK_T, DATA_BYTES, SCALE_BYTES)
            dst = base + buf * SLOT + gl.arange(0, BLOCK_T, layout=TL) * TOKEN_BYTES
            if SCALE_COPY:
                gl.inline_asm_elementwise(_TOKEN_ASM, "=r,r,l,r,l,r,r",
                                          [dst, data.to(gl.int64, bitcast=True), bar0 + 8 * buf,
                                           scale.to(gl.int64, bitcast=True), valid.to(gl.int32), dst + DATA_BYTES],
                                          dtype=gl.int32, is_pure=False, pack=1)
            else:  # the data by the TMA unit, the 8 scale bytes by this lane (xor-reduced, so the load stays)
                gl.inline_asm_elementwise(_DATA_ASM, "=r,r,l,r,r",
                                          [dst, data.to(gl.int64, bitcast=True), bar0 + 8 * buf, valid.to(gl.int32)],
                                          dtype=gl.int32, is_pure=False, pack=1)
                sw = gl.load((scale + half * 8).to(gl.pointer_type(gl.int64), bitcast=True), mask=valid, other=0)
                acc ^= (sw ^ (sw >> 32)).to(gl.int32)
    gl.store(sink_ptr + pid_q * gl.num_programs(0) + split, gl.xor_sum(acc, 0))
    smem._keep_alive()


# ----------------------------------------------------------------------------- launch

def check_cache(cache: torch.Tensor) -> None:
    """Bulk copies move 16-byte aligned multiples of 16 bytes: every row, scale chunk and page must start on 16."""
    if cache.stride(0) % 16 or cache.data_ptr() % 16:
        raise ValueError(f"bulk_gather_probe: a page of {cache.shape[1]} tokens (stride {cache.stride(0)} bytes) "
                         "does not keep rows 16-byte aligned; use an even page size")


def launch_bulk(*, cache, indices, num_splits, tokens_per_split, sink, block_t, num_bufs, scale_copy=True,
                check=False):
    """Land every selected token's bytes in shared memory once; returns the [b*s_q, num_splits] int32 sink (the
    xor of the landed words in the CHECK build, 0 otherwise)."""
    from workbench.kernels.common import scope_args
    check_cache(cache)
    b, s_q, topk = indices.shape
    sa = scope_args("", cache, indices, None)
    bulk_gather_kernel[(num_splits, b * s_q)](
        sa["cache_u8"], sa["stride_page"], sa["block_size"], sa["num_tokens"], indices, indices.stride(0),
        indices.stride(1), sink, s_q, topk, tokens_per_split, DATA_BYTES=DATA, SCALE_BYTES=SCALE,
        TOKEN_BYTES=token_bytes(scale_copy), BLOCK_T=block_t, NUM_BUFS=num_bufs, CHECK=check,
        SCALE_COPY=scale_copy, num_warps=1)
    return sink


class BulkProvider(ProbeProvider):
    """A variant as the bench's probe provider (its grid and its prepare), on the floor probes' grid."""

    def __init__(self, name: str, tokens_per_program: int, check: bool = False):  # no registered spec to look up
        from types import SimpleNamespace
        self.name, self.tokens_per_program = name, tokens_per_program
        self.block_t, self.num_bufs, self.scale_copy = VARIANTS[name]

        def launch(config=None, **kw):
            return launch_bulk(**kw, block_t=self.block_t, num_bufs=self.num_bufs, scale_copy=self.scale_copy,
                               check=check)
        self.spec = SimpleNamespace(launch=launch, config_cls=None)


# ----------------------------------------------------------------------------- CPU lab, GPU check and timing

def compile_only() -> int:
    """Compile each variant (timed and CHECK builds) for sm_90a with no GPU; print shared bytes and SASS counts."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from workbench.lab.resources import _read_cubin
    from workbench.lab.sass_loops import instructions, opcode
    sig = dict(cache_u8="*u8", stride_page="i64", block_size="i32", num_tokens="i32", idx_ptr="*i32", stride_ib="i32",
               stride_is="i32", sink_ptr="*i32", S_Q="i32", TOPK="i32", tokens_per_split="i32")
    for name, (bt, nb, sc) in VARIANTS.items():
        for check in (False, True):
            const = dict(DATA_BYTES=DATA, SCALE_BYTES=SCALE, TOKEN_BYTES=token_bytes(sc), BLOCK_T=bt, NUM_BUFS=nb,
                         CHECK=check, SCALE_COPY=sc)
            fn = bulk_gather_kernel
            src = GluonASTSource(fn, {a: sig.get(a, "constexpr") for a in fn.arg_names}, const,
                                 attrs={(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
                                        if a in ("cache_u8", "idx_ptr", "sink_ptr", "stride_page")})
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1, num_stages=1))
            usage, sass = _read_cubin(k.asm["cubin"])
            ops = [opcode(t) for _, t in instructions(sass)]
            count = {o: ops.count(o) for o in ("UBLKCP", "SYNCS", "R2UR", "LDS", "BRA")}
            print(f"{name:12s} CHECK={int(check)}: shared {k.metadata.shared} B, registers {usage['registers']}, "
                  f"{len(ops)} SASS instructions, " + " ".join(f"{a}={b}" for a, b in count.items()), flush=True)
    return 0


def hostile(kw: dict, gen: torch.Generator) -> dict:
    """The call with a tenth of its indices -1 and a twentieth past the cache (both must land nothing)."""
    ix = kw["indices"].clone()
    n = kw["cache"].shape[0] * kw["cache"].shape[1]
    r = torch.rand(ix.shape, device=ix.device, generator=gen)
    ix[r < 0.10] = -1
    ix[(r >= 0.10) & (r < 0.15)] = n + 7
    return dict(kw, indices=ix)


def check_variants(variants, kws, split_tokens, label) -> set:
    """The variants whose CHECK build's per-program xor differs from gather's on the same grid, in any call."""
    want = [ProbeProvider("gather", tokens_per_program=split_tokens or None).prepare(kw)() for kw in kws]
    failed = set()
    for v in variants:
        got = [BulkProvider(v, split_tokens, check=True).prepare(kw)() for kw in kws]
        torch.cuda.synchronize()
        ok = all(torch.equal(g, w) for gs, ws in zip(got, want) for g, w in zip(gs, ws))
        print(f"check {v:12s} {label} split={split_tokens}: {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            failed.add(v)
    return failed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--check", action="store_true",
                   help="check every variant against gather before timing it (also on -1 and out-of-range indices "
                        "and on partial tiles, b4 h16 topk100)")
    p.add_argument("--shape", action="append", default=[], help="batch,heads,topk (default: b64 h16 topk2048)")
    p.add_argument("--split-tokens", nargs="+", type=int, default=[64, 0],
                   help="tokens a program (0: the decode's split plan)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--csv")
    a = p.parse_args(argv)
    if a.compile_only:
        return compile_only()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("bulk_gather_probe: needs an sm_90 GPU", file=sys.stderr)
        return 2
    from workbench.accounting import call_valid_tokens, decode_cost
    from workbench.bench import BenchShape, InputPool, rows_frame
    from workbench.bench.providers import FINE_SPLIT_TOKENS, make_provider, tuned_columns
    from workbench.bench.timing import graph_samples, measure_ceilings, summarize
    from workbench.report.provenance import provenance

    shapes = [BenchShape(*map(int, s.split(","))) for s in a.shape] or [BenchShape(64, 16, 2048)]
    pool, prov, ceilings = InputPool("cuda"), provenance(), measure_ceilings("cuda")
    gen = torch.Generator(device="cuda").manual_seed(11)
    rows, failed = [], set()

    def flush():  # the table as it stands: a trap later in the run loses no row
        if a.csv and rows:
            df = rows_frame(rows)
            df.insert(df.columns.get_loc("mode") + 1, "split_tokens", [r["split_tokens"] for r in rows])
            df.to_csv(a.csv, index=False)

    if a.check:
        small = pool.inputs(BenchShape(4, 16, 100))
        for n in a.split_tokens:
            failed |= check_variants(a.variants, [hostile(kw, gen) for kw in small[:2]], n, "b4 h16 topk100 hostile")
            for shape in shapes:
                kws = pool.inputs(shape)
                failed |= check_variants(a.variants, kws[:2] + [hostile(kw, gen) for kw in kws[:2]], n,
                                         f"{shape.label} (+hostile)")
    for shape in shapes:
        kws = pool.inputs(shape)
        valid = call_valid_tokens(kws[0])
        cost = decode_cost(batch=shape.batch, s_q=shape.s_q, heads=shape.heads, valid_tokens=valid)
        for n in a.split_tokens:
            items = [(v, BulkProvider(v, n)) for v in a.variants if v not in failed]
            items += [("gather", ProbeProvider("gather", tokens_per_program=n or None))]
            if n == FINE_SPLIT_TOKENS:  # gather on this grid with its pinned config: the published floor
                items += [("gather_fine", make_provider("gather_fine"))]
            for name, provider in items:
                row = dict(sweep="bulk_gather", provider=name, kernel=name, mode="graph", split_tokens=n,
                           batch=shape.batch, s_q=shape.s_q, heads=shape.heads, topk=shape.topk,
                           block_size=shape.block_size, valid_tokens=valid, bytes=cost.bytes, **ceilings, **prov)
                try:
                    med, p20, p80 = summarize(graph_samples([provider.prepare(kw) for kw in kws]))
                except Exception as e:  # noqa: BLE001 - a probe that does not build or run is a row
                    rows.append(dict(row, status="error", reason=f"{type(e).__name__}: {e}"[:300]))
                    print(f"{shape.label} {name:12s} split={n}: error {rows[-1]['reason']}", flush=True)
                    flush()
                    continue
                if name in VARIANTS:  # num_stages holds the ring's slots
                    row.update(BLOCK_T=provider.block_t, num_warps=1, num_stages=provider.num_bufs)
                else:
                    row.update(tuned_columns(provider))
                gbps = cost.bytes / (med * 1e-6) / 1e9
                rows.append(dict(row, status="ok", median_us=med, p20_us=p20, p80_us=p80, gbps=gbps,
                                 frac_hbm=gbps / ceilings["hbm_copy_gbps"],
                                 check_passed=(name not in failed) if a.check and name in VARIANTS else None))
                print(f"{shape.label} {name:12s} split={n:<4d} {med:7.2f} us ({p20:.2f}-{p80:.2f}) {gbps:5.0f} GB/s "
                      f"({gbps / ceilings['hbm_copy_gbps']:.2f} of copy)", flush=True)
                flush()
    if a.csv:
        print(f"table: {a.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
