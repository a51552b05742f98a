# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: expm1 as exp(x) - 1. Near zero exp(x) is 1 plus the digits that matter, and rounding it
# to float32 keeps only a few of them: at x = 1e-4 the result is off by about 1e-4 of itself.
# Must fail: accuracy_error in numerics (float32)
@triton.jit
def expm1_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, tl.exp(x) - 1.0, mask=mask)


def expm1(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        expm1_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
