# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/log1p.naive_near_zero.py, which fixes exactly its defect.
# Fix: log(u) with u = 1 + x, corrected by what rounding u dropped, ((u - 1) - x) / u; a zero is
# returned as it came (log1p(-0.0) is -0.0).
# Claims: float32
@triton.jit
def log1p_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    u = 1.0 + x
    finite_nonzero = (u != 0.0) & (u - u == 0.0)
    y = tl.log(u) - tl.where(finite_nonzero, ((u - 1.0) - x) / u, 0.0)
    tl.store(out_ptr + offsets, tl.where(x == 0.0, x, y), mask=mask)


def log1p(input):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    n = x.numel()
    if n:
        log1p_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
