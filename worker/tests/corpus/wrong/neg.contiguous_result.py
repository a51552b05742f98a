# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: the input is made contiguous and the result allocated like that copy, so a transposed
# input gives a contiguous result where torch.neg keeps the input's layout (strides (1, 20) for a
# transposed 20x20 input): every value right, the layout not ATen's.
# Must fail: accuracy_error/layout in layouts (float32)
@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if x.dtype.is_floating():
        x = x.to(tl.float32)  # exact here; and the interpreter keeps bfloat16 as raw bits
    tl.store(out_ptr + offsets, (x * -1).to(out_ptr.dtype.element_ty), mask=mask)


def neg(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        neg_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
