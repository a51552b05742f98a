# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: neg as Triton's unary minus, which is 0 - x: neg(+0.0) comes out +0.0 where torch.neg
# gives -0.0. (Every other value, NaN, inf and the integers are right.)
# Must fail: accuracy_error in extremal (float32)
@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, -x, mask=mask)


def neg(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        neg_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
