# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/tanh.exp_overflow.py, which fixes exactly its defect.
# Fix: tanh(|x|) as t / (t + 2) with t = expm1(2|x|), 1 beyond |x| = 20 where t would overflow,
# the sign put back; expm1 by its Taylor polynomial below 0.5, so that nothing cancels near zero
# either (wrong/tanh.near_zero_cancellation.py); a zero is returned as it came (tanh(-0.0) is
# -0.0).
# Claims: bfloat16, float16, float32
@triton.jit
def expm1_kernel(x):
    p = 1.0 / 40320.0 + x / 362880.0
    p = 1.0 / 720.0 + x * (1.0 / 5040.0 + x * p)
    p = 1.0 / 24.0 + x * (1.0 / 120.0 + x * p)
    p = 0.5 + x * (1.0 / 6.0 + x * p)
    p = x * (1.0 + x * p)
    return tl.where(tl.abs(x) < 0.5, p, tl.exp(x) - 1.0)


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    a = tl.abs(x)
    t = expm1_kernel(2.0 * a)
    magnitude = tl.where(a > 20.0, 1.0, t / (t + 2.0))
    y = tl.where(x < 0, -magnitude, magnitude)
    tl.store(out_ptr + offsets, tl.where(x == 0, x, y), mask=mask)


def tanh(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        tanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
