"""The dot and convolution count of HLO text (bench.hlo_flops) on hand-written modules."""

import pytest

from bench.hlo_flops import dot_conv_flops

# the two forms XLA prints: operands by name only (lowered), and with their shapes inline (older)
DOTS = """
HloModule m
ENTRY main {
  x.1 = f32[64,256]{1,0} parameter(0)
  w.1 = f32[256,512]{1,0} parameter(1)
  dot.1 = f32[64,512]{1,0} dot(x.1, w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %q = f32[8,4,32,16]{3,2,1,0} parameter(2)
  %k = f32[8,4,32,16]{3,2,1,0} parameter(3)
  ROOT %s = f32[8,4,32,32]{3,2,1,0} dot(f32[8,4,32,16]{3,2,1,0} %q, f32[8,4,32,16]{3,2,1,0} %k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
}
"""

CONVS = """
ENTRY main {
  img = f32[2,32,32,3]{3,2,1,0} parameter(0)
  ker = f32[3,3,3,16]{3,2,1,0} parameter(1)
  fwd = f32[2,32,32,16]{3,2,1,0} convolution(img, ker), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  g = f32[2,16,16,8]{3,2,1,0} parameter(2)
  k2 = f32[3,3,8,16]{3,2,1,0} parameter(3)
  dx = f32[2,32,32,16]{3,2,1,0} convolution(g, k2), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f
}
"""


def test_dots_count_two_flops_per_multiply_add_over_batch_dims():
    f = dot_conv_flops(DOTS)
    assert f == {"dot": 2 * 64 * 256 * 512 + 2 * 8 * 4 * 32 * 32 * 16, "convolution": 0}


def test_convolutions_count_window_and_features_and_skip_the_inserted_zeros():
    f = dot_conv_flops(CONVS)
    forward = 2 * 2 * 32 * 32 * 16 * (3 * 3 * 3)
    # the input gradient of a stride-2 convolution: a quarter of the dilated input's taps are real
    input_grad = 2 * 2 * 32 * 32 * 16 * (3 * 3 * 8) // 4
    assert f == {"dot": 0, "convolution": forward + input_grad}


def test_an_operand_of_unknown_shape_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="unknown shape"):
        dot_conv_flops("ENTRY e {\n  d = f32[2,2]{1,0} dot(a, b), lhs_contracting_dims={1}\n}")
