# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# accuracy_error on the fresh values only: an overflow guard set too low clamps exp's input at
# 7.5, above every value of the first sample (seed 0) and below one of its fresh values.
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.minimum(tl.load(x_ptr + offsets, mask=mask), 7.5)
    tl.store(out_ptr + offsets, tl.exp(x), mask=mask)


def exp(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    if x.numel():
        exp_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out.view(input.shape)
