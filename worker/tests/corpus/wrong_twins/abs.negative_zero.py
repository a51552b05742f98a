# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/abs.negative_zero.py, which fixes exactly its defect.
# Fix: tl.abs, which clears the sign bit of -0.0 (the integer minimum wraps, as in torch.abs).
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def abs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if x.dtype.is_floating():
        x = x.to(tl.float32)  # exact here; and the interpreter keeps bfloat16 as raw bits
    tl.store(out_ptr + offsets, tl.abs(x).to(out_ptr.dtype.element_ty), mask=mask)


def abs(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        abs_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
