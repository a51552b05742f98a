# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: sigmoid as e^x / (1 + e^x). For x above about 88.7, e^x overflows float32 and the
# quotient is inf / inf = NaN where sigmoid is 1.
# Must fail: accuracy_error in extremal (float32)
@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    e = tl.exp(x)
    tl.store(out_ptr + offsets, e / (1.0 + e), mask=mask)


def sigmoid(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        sigmoid_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
