"""workbench.lab.sass_loops on a hand-written disassembly, laid out as cuobjdump prints it: two nested loops, a
forward branch, and an mbarrier retry after the last EXIT that branches back into the inner loop."""
import pytest

from workbench.lab import sass_loops

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                         /* 0x00000a0000017a02 */
        /*0010*/                   S2R R0, SR_TID.X ;                             /* 0x0000000000007919 */
        /*0020*/                   LDL.LU R2, [R1] ;                              /* 0x0000000001027983 */
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;          /* 0x0000000c0804723c */
        /*0040*/                   NOP ;                                          /* 0x0000000000007918 */
        /*0050*/               @P0 BRA 0x30 ;                                     /* 0xfffffffc00000947 */
        /*0060*/                   STL [R1], R2 ;                                 /* 0x0000000201007387 */
        /*0070*/              @!P1 BRA 0x20 ;                                     /* 0xfffffffc0000a947 */
        /*0080*/                   BRA 0xa0 ;                                     /* 0x0000000000047947 */
        /*0090*/                   NOP ;                                          /* 0x0000000000007918 */
        /*00a0*/                   EXIT ;                                         /* 0x000000000000794d */
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2], R3 ;  /* 0x00000002030075a7 */
        /*00c0*/                   BRA 0x40 ;                                     /* 0xfffffffc00000947 */
"""


def test_instructions_keep_address_and_text():
    ins = sass_loops.instructions(SASS)
    assert len(ins) == 13
    assert ins[5] == (0x50, "@P0 BRA 0x30") and ins[2] == (0x20, "LDL.LU R2, [R1]")


@pytest.mark.parametrize("text, op", [("@!P1 LDL.LU.64 R12, [R1+0x8]", "LDL"), ("NOP", "NOP"),
                                      ("HMMA.16816.F32.BF16 R4, R8, R12, R4", "HMMA"), ("@P0 BRA 0x30", "BRA")])
def test_opcode_drops_predicate_and_modifiers(text, op):
    assert sass_loops.opcode(text) == op


def test_loops_are_backward_branches_before_the_last_exit():
    found = sass_loops.loops(SASS)
    # the forward branch at 0x80 and the retry after EXIT (0xc0 -> 0x40) are not loops
    assert [(lp.first, lp.last) for lp in found] == [(0x20, 0x70), (0x30, 0x50)]
    outer, inner = found
    assert outer.contains(inner) and not inner.contains(outer) and not outer.contains(outer)
    assert [lp.first for lp in sass_loops.innermost(found)] == [0x30]
    assert (outer.count("LDL"), outer.count("STL"), outer.count("HMMA"), outer.count("NOP")) == (1, 1, 1, 1)
    assert (inner.count("LDL"), inner.count("STL"), inner.count("HMMA"), inner.count("NOP")) == (0, 0, 1, 1)
    assert inner.opcodes() == {"HMMA": 1, "NOP": 1, "BRA": 1}


def test_a_text_without_exit_is_refused():
    with pytest.raises(ValueError, match="no EXIT"):
        sass_loops.loops("/*0000*/ NOP ;\n/*0010*/ BRA 0x0 ;")
