"""Loops in SASS text (``cuobjdump --dump-sass``, as :func:`workbench.lab.resources.compiled_sass` returns it): the
ladder asks what a kernel's loops hold (local-memory traffic, NOPs, the order of loads and MMAs), and a count over
the whole kernel mixes a hot loop with code that runs once a program.

A loop is a branch target that a later ``BRA`` jumps back to; it ends at the furthest such branch (a loop with a
``continue`` has several). Only branches before the kernel's last EXIT count: after it sit the out-of-line retries
of the mbarrier waits, which branch back into the loops they serve and are not loops of their own. Indirect
branches (``BRX``, ``JMX``) are not followed; the kernels here have none in their loops.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")


def instructions(sass: str) -> list[tuple[int, str]]:
    """[(address, text)] of every instruction, its text with runs of blanks made one ("@!P0 BRA 0x7700")."""
    return [(int(a, 16), " ".join(t.split())) for a, t in _INSTRUCTION.findall(sass)]


def opcode(text: str) -> str:
    """The instruction's opcode without its modifiers or predicate: "@!P1 LDL.LU.64 R12, [R1]" -> "LDL"."""
    words = text.split()
    return (words[1] if words[0].startswith("@") else words[0]).split(".")[0]


@dataclass(frozen=True)
class Loop:
    first: int   # the branch target's address
    last: int    # the backward branch's address
    body: tuple  # [(address, text)] from first to last, both included

    def count(self, op: str) -> int:
        """Instructions of opcode ``op`` in the body ("LDL", "HMMA", "NOP")."""
        return sum(opcode(t) == op for _, t in self.body)

    def opcodes(self) -> Counter:
        return Counter(opcode(t) for _, t in self.body)

    def contains(self, other: "Loop") -> bool:
        """Whether ``other`` is another loop nested in this one (a loop does not contain itself)."""
        return (other.first, other.last) != (self.first, self.last) and \
            self.first <= other.first and other.last <= self.last


def loops(sass: str) -> list[Loop]:
    """Every loop of the SASS, ordered by its first address (nested loops included: see :func:`innermost`)."""
    ins = instructions(sass)
    exits = [a for a, t in ins if opcode(t) == "EXIT"]
    if not exits:
        raise ValueError("no EXIT in this SASS: not a kernel's disassembly")
    last_exit = max(exits)
    last = {}  # target -> its furthest backward branch
    for a, t in ins:
        m = _BRANCH_TARGET.search(t) if a < last_exit and opcode(t) == "BRA" else None
        if m and int(m.group(1), 16) < a:
            last[int(m.group(1), 16)] = a
    return [Loop(lo, hi, tuple((a, t) for a, t in ins if lo <= a <= hi)) for lo, hi in sorted(last.items())]


def innermost(found: list[Loop]) -> list[Loop]:
    """The loops that hold no other loop (a kernel's tile loops, not the partitions' dispatch around them)."""
    return [lp for lp in found if not any(lp.contains(other) for other in found)]
