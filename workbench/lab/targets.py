"""Per-target GPU limits and the occupancy calculation.

Sources: NVIDIA CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability" table (shared memory per SM / per block, 32-bit registers per SM,
resident warps and blocks per SM, 255 registers per thread, 1 KB of shared memory
reserved per block from cc 8.0 on, register allocation in units of 256 per warp);
SM counts from the vendors' product pages: H200 SXM 132, B200 148, RTX PRO 6000
Blackwell 188, L40S 142. Memory bandwidth (``dram_gbps``, the vendor's peak, not a measurement) only where a
projection uses it: RTX PRO 6000 Blackwell 1,792 GB/s of GDDR7 (NVIDIA's published spec: 96 GB on a
512-bit bus), for notebook 03's sm_120 projection (the floor of a decode is its bytes over this rate).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuTarget:
    arch: str
    capability: int          # 90 for sm_90
    example_gpu: str
    sms: int
    smem_per_sm: int         # bytes, usable by blocks
    smem_per_block: int      # bytes, opt-in maximum for one block
    regs_per_sm: int
    max_regs_per_thread: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    smem_reserved_per_block: int = 1024
    reg_alloc_unit: int = 256  # registers, per warp
    dram_gbps: float | None = None  # the example GPU's peak memory bandwidth (vendor spec, GB/s); None: not recorded

    def occupancy(self, *, num_warps: int, regs_per_thread: int, shared_bytes: int) -> dict:
        """Blocks and warps one SM holds for a kernel of this shape, and what limits it."""
        regs_warp = -(-regs_per_thread * 32 // self.reg_alloc_unit) * self.reg_alloc_unit
        by = {
            "warps": self.max_warps_per_sm // num_warps,
            "registers": self.regs_per_sm // (regs_warp * num_warps) if regs_warp else self.max_blocks_per_sm,
            "shared_memory": (self.smem_per_sm // (shared_bytes + self.smem_reserved_per_block)
                              if shared_bytes <= self.smem_per_block else 0),
            "blocks": self.max_blocks_per_sm,
        }
        limiter = min(by, key=by.get)
        blocks = by[limiter]
        return dict(blocks_per_sm=blocks, warps_per_sm=blocks * num_warps,
                    occupancy=blocks * num_warps / self.max_warps_per_sm, limiter=limiter)


TARGETS = {
    # 188 SMs and 1,792 GB/s: NVIDIA's spec of the RTX PRO 6000 Blackwell (the seeds' GPU, issue 24)
    "sm_120": GpuTarget("sm_120", 120, "RTX PRO 6000 Blackwell", 188, 102_400, 101_376, 65_536, 255, 48, 32,
                        dram_gbps=1792.0),
    "sm_100": GpuTarget("sm_100", 100, "B200", 148, 233_472, 232_448, 65_536, 255, 64, 32),
    "sm_90": GpuTarget("sm_90", 90, "H200", 132, 233_472, 232_448, 65_536, 255, 64, 32),
    "sm_89": GpuTarget("sm_89", 89, "L40S", 142, 102_400, 101_376, 65_536, 255, 48, 24),
}


def get_target(arch: str) -> GpuTarget:
    if arch not in TARGETS:
        raise ValueError(f"arch: expected one of {sorted(TARGETS)}, got {arch!r}")
    return TARGETS[arch]


def target_for_capability(major: int, minor: int) -> GpuTarget:
    cap = major * 10 + minor
    for t in TARGETS.values():
        if t.capability == cap:
            return t
    # nearest lower known target: limits of a family change rarely within it
    lower = [t for t in TARGETS.values() if t.capability <= cap]
    if not lower:
        raise ValueError(f"compute capability {major}.{minor}: no target at or below it (fp8 needs sm_89+)")
    return max(lower, key=lambda t: t.capability)
