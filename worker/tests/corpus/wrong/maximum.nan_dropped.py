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
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > y, x, y), mask=mask)


def maximum(input, other):
    shape = torch.broadcast_shapes(input.shape, other.shape)
    out_dtype = torch.result_type(input, other)
    # Half types go through float32 copies (exact both ways): the interpreter keeps bfloat16 as
    # raw bits and converts its subnormals to signed zeros.
    compute_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    x = input.to(compute_dtype).expand(shape).contiguous()
    y = other.to(compute_dtype).expand(shape).contiguous()
    out = torch.empty(shape, dtype=compute_dtype, device=input.device)
    n = out.numel()
    if n:
        maximum_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out.to(out_dtype)
