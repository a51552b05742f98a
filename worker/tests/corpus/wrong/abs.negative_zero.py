# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: abs as tl.where(x < 0, -x, x). -0.0 < 0 is false, so abs(-0.0) stays -0.0; torch.abs
# clears the sign bit and gives +0.0.
# Must fail: accuracy_error in extremal (float32)
@triton.jit
def abs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x < 0, -x, x), mask=mask)


def abs(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        abs_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
