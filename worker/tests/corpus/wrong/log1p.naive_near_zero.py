# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: log1p as log(1 + x). Rounding 1 + x drops the low digits of a small x: at x = 1e-4 the
# result is off by about 1e-4 of itself, hidden by the absolute tolerance at OpInfo's magnitudes.
# Must fail: accuracy_error in numerics (float32)
@triton.jit
def log1p_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, tl.log(1.0 + x), mask=mask)


def log1p(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        log1p_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
