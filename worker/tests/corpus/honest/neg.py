# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest elementwise kernel: neg, as x * -1. Triton compiles -x as 0 - x, which turns 0.0 into
# +0.0 where neg gives -0.0.
@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * -1, mask=mask)


def neg(input):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    if x.numel():
        neg_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
