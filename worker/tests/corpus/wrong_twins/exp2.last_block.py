# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/exp2.last_block.py, which fixes exactly its defect.
# Fix: cdiv(n, BLOCK) programs, so the last partial block runs too.
# Claims: bfloat16, float16, float32
@triton.jit
def exp2_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.exp2(x.to(tl.float32)).to(x.dtype), mask=mask)


def exp2(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        exp2_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
