# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: the input is indexed as flat memory of numel elements without being made contiguous.
# empty_like keeps a transposed or permuted layout, so those still come out right; a strided
# slice such as x[:, ::2] (or an offset or expanded view) reads the wrong elements.
# Must fail: accuracy_error in layouts (float32)
@triton.jit
def sqrt_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.sqrt_rn(x), mask=mask)


def sqrt(input):
    # Half types go through float32 copies (exact both ways): the interpreter keeps bfloat16 as
    # raw bits and converts its subnormals to signed zeros.
    half = input.dtype in (torch.float16, torch.bfloat16)
    x = input.to(torch.float32) if half else input
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        sqrt_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.to(input.dtype)
