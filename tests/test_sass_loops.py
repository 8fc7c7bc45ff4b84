"""workbench.lab.sass_loops on hand-written disassemblies, laid out as cuobjdump prints them: nested loops, a loop
with two back-edges (a ``continue``), a forward branch, two EXITs, sm_120's scheduling annotations, and an mbarrier
retry after the last EXIT that branches back into a loop."""
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

# a loop (0x10-0x60) with a `continue` (the back-edge at 0x30) and its last back-edge on a uniform predicate, an
# EXIT inside the kernel and one at its end, and sm_120's annotations after the operands
SASS_TWO_EDGES = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                                           /* 0x0 */
        /*0010*/                   LDS.U8 R4, [R2+UR6+0x18880] &wr=0x1 ?trans2 ;                    /* 0x0 */
        /*0020*/                   ISETP.NE.AND P0, PT, R4, RZ, PT ;                                /* 0x0 */
        /*0030*/               @P0 BRA 0x10 ;                                                       /* 0x0 */
        /*0040*/                   STL [R1], R0 &rd=0x0 ?trans1 ;                                   /* 0x0 */
        /*0050*/              @!P2 EXIT ;                                                           /* 0x0 */
        /*0060*/                   BRA.U !UP0, 0x10 ;                                               /* 0x0 */
        /*0070*/                   EXIT ;                                                           /* 0x0 */
"""


def test_instructions_keep_address_and_text():
    ins = sass_loops.instructions(SASS)
    assert len(ins) == 13
    assert ins[5] == (0x50, "@P0 BRA 0x30") and ins[2] == (0x20, "LDL.LU R2, [R1]")


@pytest.mark.parametrize("text, op", [("@!P1 LDL.LU.64 R12, [R1+0x8]", "LDL"), ("NOP", "NOP"),
                                      ("HMMA.16816.F32.BF16 R4, R8, R12, R4", "HMMA"), ("@P0 BRA 0x30", "BRA"),
                                      ("STL [R1], R0 &rd=0x0 ?trans1", "STL"), ("BRA.U !UP0, 0x10", "BRA")])
def test_opcode_drops_predicate_and_modifiers(text, op):
    assert sass_loops.opcode(text) == op


def test_loops_are_backward_branches_before_the_last_exit():
    found = sass_loops.loops(SASS)
    # the forward branch at 0x80 and the retry after EXIT (0xc0 -> 0x40) are not loops
    assert [(lp.first, lp.last) for lp in found] == [(0x20, 0x70), (0x30, 0x50)]
    outer, inner = found
    assert outer.contains(inner) and not inner.contains(outer) and not outer.contains(outer)
    assert not outer.contains(sass_loops.loops(SASS)[0])  # the same loop, found again
    assert [lp.first for lp in sass_loops.innermost(found)] == [0x30]
    assert (outer.count("LDL"), outer.count("STL"), outer.count("HMMA"), outer.count("NOP")) == (1, 1, 1, 1)
    assert (inner.count("LDL"), inner.count("STL"), inner.count("HMMA"), inner.count("NOP")) == (0, 0, 1, 1)
    assert inner.opcodes() == {"HMMA": 1, "NOP": 1, "BRA": 1}


def test_a_loop_with_two_back_edges_is_one_loop_to_its_furthest():
    found = sass_loops.loops(SASS_TWO_EDGES)
    # one loop 0x10-0x60 (not a second, nested 0x10-0x30); the EXIT at 0x50 is not the last, so 0x60 counts
    assert [(lp.first, lp.last) for lp in found] == [(0x10, 0x60)]
    assert sass_loops.innermost(found) == found
    assert (found[0].count("STL"), found[0].count("LDS"), found[0].count("EXIT")) == (1, 1, 1)


def test_a_text_without_exit_is_refused():
    with pytest.raises(ValueError, match="no EXIT"):
        sass_loops.loops("/*0000*/ NOP ;\n/*0010*/ BRA 0x0 ;")
