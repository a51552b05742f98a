# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: relu as tl.where(x > 0, x, 0). NaN > 0 is false, so NaN becomes 0 (and -0.0 becomes
# +0.0); torch.relu keeps both.
# Must fail: accuracy_error in extremal (float32)
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0), mask=mask)


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
