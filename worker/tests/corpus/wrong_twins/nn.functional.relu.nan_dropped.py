# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/nn.functional.relu.nan_dropped.py, which fixes exactly its defect.
# Fix: zero only what is below 0, so NaN and -0.0 pass through as torch.relu keeps them.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x < 0, tl.zeros_like(x), x), mask=mask)


def relu(input, inplace=False):
    # Half types go through float32 copies (exact both ways): the interpreter keeps bfloat16 as
    # raw bits and converts its subnormals to signed zeros.
    half = input.dtype in (torch.float16, torch.bfloat16)
    wide = input.to(torch.float32) if half else input
    out = torch.empty_like(wide)  # ATen's layout: a dense input's strides
    x = wide if wide.stride() == out.stride() else torch.empty_like(out).copy_(wide)
    n = x.numel()
    if n:
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.to(input.dtype)
