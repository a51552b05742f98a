# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest abs, elementwise on any layout (made contiguous first): the export tests' unary
# operator with in-place (abs_) and out= overloads to derive.
@triton.jit
def abs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.abs(x), mask=mask)


def abs(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    if x.numel():
        abs_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
