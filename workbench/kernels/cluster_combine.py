"""The combine inside the partial launch: a query head group's splits run as the CTAs of one thread-block cluster
(sm_90), and after writing their partial rows they merge them among themselves and write the call's bf16 out and
lse, so no combine kernel follows.

Why: at b1 h64 topk512 the combine launch costs 1.35 us of the call's 7.68 (isolate sweep, H100, 809d7b2:
``auto~no_combine`` 6.32 us): a second kernel's launch and load latency for 1 MB of partials. In a cluster every
CTA of the split group is co-scheduled, so a ``barrier.cluster`` (release, acquire: the partial rows written to
global memory by one CTA are visible to the others after it) replaces the kernel boundary, and the merge is spread
over the group: CTA ``rank`` finalises the 64-column chunks rank, rank + CLUSTER, ... of every head of the group,
reading each split's chunk (from L2: written a moment before) and the splits' LSEs.

The merge is the combine kernel's (``combine.py``) in the same operations: a NaN LSE poisons the row, splits with
LSE -inf carry no weight and their rows (never written) are read but selected away, an empty row gets out 0 and lse
+inf, and the sink multiplies out by 1/(1+exp(sink - lse)).

How the cluster launch is made (Triton 3.6, as ``scripts/cluster_share_probe.py`` found): the launch's ``CLUSTER``
constexpr tells ``common.launch`` and ``plan.compile_launch`` to give the compiled kernel ``num_ctas = CLUSTER`` in its
packed launch metadata (``common.as_cluster_launch``), so Triton's launcher launches ``gridDim.x = CLUSTER * grid[0]``
with the cluster attribute ``(CLUSTER, 1, 1)``: with ``grid[0] = 1`` the CTAs of one cluster are the splits,
``program_id(0)``. The kernel traps if its launch is not clusters of CLUSTER CTAs, so it cannot run as lone CTAs and
merge partials that no one has written.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

MAX_CLUSTER = 8   # the portable cluster size: splits of a head group in one cluster
CHUNKS = 8        # the 512 output columns in chunks of 64, dealt round-robin to the cluster's CTAs
_S = gl.constexpr(MAX_CLUSTER)
_CHUNKS = gl.constexpr(CHUNKS)


@gluon.jit
def trap_unless_cluster_of(CLUSTER: gl.constexpr):
    """A launch that is not clusters of CLUSTER CTAs stops here (a CUDA error) instead of merging unwritten rows."""
    n = gl.inline_asm_elementwise("mov.u32 $0, %cluster_nctarank;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
    if n != CLUSTER:
        gl.inline_asm_elementwise("trap;\nmov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def cluster_barrier():
    """Every thread of every CTA of the cluster: what each wrote before is visible to all after (cluster scope)."""
    gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\n"
                              "barrier.cluster.wait.acquire.aligned;\n"
                              "mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def combine_in_cluster(part_out_ptr, part_lse_ptr, out_ptr, lse_ptr, sink_ptr, stride_sink, pid_q, pid_h, rank,
                       s_total, H, S_Q, BLOCK_H: gl.constexpr, D: gl.constexpr, CLUSTER: gl.constexpr,
                       HAS_SINK: gl.constexpr):
    """Merge the cluster's CLUSTER splits of head group ``pid_h`` of query ``pid_q`` (partial rows [b*s_q, h, s_total,
    D] fp32, base-2 LSEs [b*s_q, h, s_total]; every split written before the barrier here) into out [b, s_q, h, D]
    bf16 and lse [b, h, s_q]: this CTA (``rank``) the chunks rank, rank + CLUSTER, ... of D, and rank 0 the lse."""
    NW: gl.constexpr = gl.num_warps()
    CH: gl.constexpr = D // _CHUNKS
    S: gl.constexpr = _S
    # [S, BLOCK_H, CH]: every split of a column in one thread (the merge is in-thread), 64 columns over 16 lanes
    L: gl.constexpr = gl.BlockedLayout([S, 1, 4], [1, 2, 16], [1, NW, 1], [2, 1, 0])
    HC: gl.constexpr = gl.SliceLayout(0, L)  # [BLOCK_H, CH]
    cluster_barrier()
    s = gl.expand_dims(gl.expand_dims(gl.arange(0, S, layout=gl.SliceLayout(1, gl.SliceLayout(2, L))), 1), 2)
    head = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, gl.SliceLayout(2, L)))
    head = gl.expand_dims(gl.expand_dims(head, 0), 2)  # [1, BLOCK_H, 1]
    col = gl.expand_dims(gl.expand_dims(gl.arange(0, CH, layout=gl.SliceLayout(0, gl.SliceLayout(1, L))), 0), 1)
    row = (pid_q * H + head) * s_total + s  # [S, BLOCK_H, 1]
    have = (s < CLUSTER) & (head < H)
    lse_s = gl.load(part_lse_ptr + row, mask=have, other=float("-inf"))  # [S, BLOCK_H, 1]
    live = lse_s > float("-inf")
    # max skips NaN: a NaN split (NaN in its scores) would leave m finite or -inf; make it poison the row
    nan = gl.sum((lse_s != lse_s).to(gl.int32), 0) > 0
    m = gl.where(nan, float("nan"), gl.max(lse_s, 0))  # [BLOCK_H, 1]
    m_use = gl.where(m == float("-inf"), 0.0, m)
    w = gl.exp2(lse_s - gl.expand_dims(m_use, 0))  # [S, BLOCK_H, 1]
    w_sum = gl.sum(w, 0)
    empty = m == float("-inf")
    lse = gl.where(empty, float("inf"), (m_use + gl.log2(gl.where(empty, 1.0, w_sum))) * 0.6931471805599453)
    h2 = gl.expand_dims(pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, HC)), 1)  # [BLOCK_H, 1]
    if HAS_SINK:  # 1/(1+exp(sink-lse)); guarded because sink=+inf with lse=+inf is NaN
        sink = gl.load(sink_ptr + h2 * stride_sink, mask=h2 < H, other=0.0)
        sink_f = 1.0 / (1.0 + gl.exp(sink - lse))
    for c in range(rank, _CHUNKS, CLUSTER):
        part = gl.load(part_out_ptr + row.to(gl.int64) * D + c * CH + col, mask=have, other=0.0)  # [S, BLOCK_H, CH]
        acc = gl.sum(gl.where(live, w * part, 0.0), 0)  # [BLOCK_H, CH]
        out = gl.where(empty, 0.0, acc / gl.where(empty, 1.0, w_sum))
        if HAS_SINK:
            out = gl.where(empty, 0.0, out * sink_f)
        out_col = gl.expand_dims(c * CH + gl.arange(0, CH, layout=gl.SliceLayout(0, HC)), 0)  # [1, CH]
        gl.store(out_ptr + (pid_q * H + h2).to(gl.int64) * D + out_col, out.to(gl.bfloat16), mask=h2 < H)
    if rank == 0:
        gl.store(lse_ptr + ((pid_q // S_Q) * H + h2) * S_Q + pid_q % S_Q, lse, mask=h2 < H)
