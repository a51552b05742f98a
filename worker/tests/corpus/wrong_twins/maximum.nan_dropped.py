# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/maximum.nan_dropped.py, which fixes exactly its defect.
# Fix: tl.maximum with propagate_nan=ALL returns NaN when either side is NaN.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def maximum_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)


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
