# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: tanh as (1 - e) / (1 + e) with e = e^(-2|x|): it never overflows (the fix of
# wrong/tanh.exp_overflow.py), but near zero 1 - e cancels: at |x| = 1e-4, e rounds to float32
# with an error of about 3e-4 of 1 - e, and the result is off by as much of itself.
# Must fail: accuracy_error in numerics (float32)
@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    e = tl.exp(-2.0 * tl.abs(x))
    magnitude = (1.0 - e) / (1.0 + e)
    y = tl.where(x < 0, -magnitude, magnitude)
    tl.store(out_ptr + offsets, tl.where(x == 0, x, y), mask=mask)


def tanh(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        tanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
