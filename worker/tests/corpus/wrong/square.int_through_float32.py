# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: every dtype is squared in float32 "for accuracy". A square above 2^24 is not exact in
# float32, so int32 and int64 results are off (and ones past the integer range do not wrap).
# Must fail: accuracy_error in extremal (int32)
@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x * x).to(out_ptr.dtype.element_ty), mask=mask)


def square(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        square_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
