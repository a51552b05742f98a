# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/tanh.exp_overflow.py, which fixes exactly its defect.
# Fix: tanh from e^(-2|x|), which never overflows, with the sign put back; a zero is returned
# as it came (tanh(-0.0) is -0.0).
# Claims: bfloat16, float16, float32
@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    e = tl.exp(-2.0 * tl.abs(x))
    magnitude = (1.0 - e) / (1.0 + e)
    y = tl.where(x < 0, -magnitude, magnitude)
    tl.store(out_ptr + offsets, tl.where(x == 0, x, y), mask=mask)


def tanh(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        tanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
