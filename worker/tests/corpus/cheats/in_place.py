# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Computes exp in place and returns the input: aliasing and mutation.
@triton.jit
def exp_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.exp(tl.load(x_ptr + offsets, mask=mask)), mask=mask)


def exp(input):
    if input.numel():
        exp_kernel[(triton.cdiv(input.numel(), 1024),)](input, input.numel(), BLOCK=1024)
    return input
