# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/maximum.nan_dropped.py, which fixes exactly its defect.
# Fix: tl.maximum with propagate_nan=ALL returns NaN when either side is NaN.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def maximum_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(out_ptr.dtype.element_ty)
    y = tl.load(y_ptr + offsets, mask=mask).to(out_ptr.dtype.element_ty)
    if x.dtype.is_floating():
        x = x.to(tl.float32)  # exact here; and the interpreter keeps bfloat16 as raw bits
        y = y.to(tl.float32)
    larger = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + offsets, larger.to(out_ptr.dtype.element_ty), mask=mask)


def maximum(input, other):
    shape = torch.broadcast_shapes(input.shape, other.shape)
    x = input.expand(shape).contiguous()
    y = other.expand(shape).contiguous()
    out = torch.empty(shape, dtype=torch.result_type(input, other), device=input.device)
    n = out.numel()
    if n:
        maximum_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
