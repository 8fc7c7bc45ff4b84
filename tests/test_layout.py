"""The format spec against hand-derived numbers."""
import pytest

from workbench.format.layout import MODEL1


def test_model1_token_bytes():
    assert (MODEL1.d, MODEL1.d_nope, MODEL1.d_rope) == (512, 448, 64)
    assert MODEL1.num_tiles == 7
    assert MODEL1.data_bytes_per_token == 448 + 64 * 2 == 576
    assert MODEL1.scale_bytes_per_token == 8
    assert MODEL1.bytes_per_token == 584
    assert MODEL1.page_alignment == 576
    assert MODEL1.nope_pad == 512 and MODEL1.pad_scale_group == 7


@pytest.mark.parametrize("block_size,expected", [
    (64, 37440),    # 64*584 = 37376 -> 65*576
    (256, 149760),  # 256*584 = 149504 -> 260*576
    (61, 35712),    # 61*584 = 35624 -> 62*576
    (2, 1728),      # 1168 -> 3*576
    (1, 1152),      # 584 -> 2*576
], ids=lambda v: str(v))
def test_page_bytes(block_size, expected):
    assert MODEL1.page_bytes(block_size) == expected
    assert MODEL1.scale_offset(block_size) == block_size * 576


@pytest.mark.parametrize("bad", [0, -3, 2.5, "64"], ids=["zero", "negative", "float", "str"])
def test_page_bytes_rejects_bad_block_size(bad):
    with pytest.raises(ValueError, match="block_size"):
        MODEL1.page_bytes(bad)
