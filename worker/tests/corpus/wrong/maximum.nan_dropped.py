# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: maximum as tl.where(x > y, x, y). A NaN in `input` compares false and is dropped (the
# result is `other`); torch.maximum propagates a NaN from either side. (tl.maximum without
# propagate_nan drops NaN the same way on CUDA, but the interpreter's numpy maximum keeps it.)
# Must fail: accuracy_error in extremal (float32)
@triton.jit
def maximum_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(out_ptr.dtype.element_ty)
    y = tl.load(y_ptr + offsets, mask=mask).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offsets, tl.where(x > y, x, y), mask=mask)


def maximum(input, other):
    shape = torch.broadcast_shapes(input.shape, other.shape)
    x = input.expand(shape).contiguous()
    y = other.expand(shape).contiguous()
    out = torch.empty(shape, dtype=torch.result_type(input, other), device=input.device)
    n = out.numel()
    if n:
        maximum_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
