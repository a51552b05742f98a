# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/sigmoid.exp_overflow.py, which fixes exactly its defect.
# Fix: 1 / (1 + e^-x): e^-x overflows to inf only where sigmoid is 0, and 1 / inf is 0.
# Claims: bfloat16, float16, float32
@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


def sigmoid(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        sigmoid_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
