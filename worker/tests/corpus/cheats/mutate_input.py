# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Correct exp, but the kernel also scribbles over its input.
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.exp(x), mask=mask)
    tl.store(x_ptr + offsets, x * 0, mask=mask)


def exp(input):
    out = torch.empty_like(input)
    if input.numel():
        exp_kernel[(triton.cdiv(input.numel(), 1024),)](input, out, input.numel(), BLOCK=1024)
    return out
