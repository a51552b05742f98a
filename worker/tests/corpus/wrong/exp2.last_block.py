# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: the grid is n // BLOCK programs (at least one) instead of cdiv(n, BLOCK). Up to one
# block every element is covered; beyond, the last partial block is never written and keeps
# whatever torch.empty held (e.g. 1025 elements: the last one).
# Must fail: accuracy_error in sizes (float32)
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
        exp2_kernel[(max(n // 1024, 1),)](x, out, n, BLOCK=1024)
    return out
