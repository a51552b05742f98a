# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/expm1.naive_near_zero.py, which fixes exactly its defect.
# Fix: for |x| < 0.5 a Taylor polynomial of expm1 (its first omitted term far below float32's
# rounding there; x times it keeps -0.0), exp(x) - 1 beyond.
# Claims: float32
@triton.jit
def expm1_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    p = 1.0 / 40320.0 + x / 362880.0
    p = 1.0 / 720.0 + x * (1.0 / 5040.0 + x * p)
    p = 1.0 / 24.0 + x * (1.0 / 120.0 + x * p)
    p = 0.5 + x * (1.0 / 6.0 + x * p)
    p = x * (1.0 + x * p)
    tl.store(out_ptr + offsets, tl.where(tl.abs(x) < 0.5, p, tl.exp(x) - 1.0), mask=mask)


def expm1(input):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    n = x.numel()
    if n:
        expm1_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
