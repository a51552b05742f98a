# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/tanh.near_zero_cancellation.py, which fixes exactly its defect.
# Fix: for |x| < 0.125 the odd Taylor polynomial of tanh (its first omitted term,
# 1382x^11/155925, far below float32's rounding there), (1 - e) / (1 + e) with e = e^(-2|x|)
# beyond.
# Claims: bfloat16, float16, float32
@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    s = a * a
    taylor = 2.0 / 15.0 + s * (-17.0 / 315.0 + s * (62.0 / 2835.0))
    taylor = a * (1.0 + s * (-1.0 / 3.0 + s * taylor))
    magnitude = tl.where(a < 0.125, taylor, (1.0 - e) / (1.0 + e))
    y = tl.where(x < 0, -magnitude, magnitude)
    tl.store(out_ptr + offsets, tl.where(x == 0, x, y), mask=mask)


def tanh(input):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    n = x.numel()
    if n:
        tanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
