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


def output_like(operands, shape, dtype):
    """The output laid out as ATen lays out an elementwise result: like the first operand of the
    result's shape (torch.empty_like: its strides where it is dense), contiguous if none is."""
    for value in operands:
        if value.shape == shape:
            return torch.empty_like(value, dtype=dtype)
    return torch.empty(shape, dtype=dtype, device=operands[0].device)


def laid_out(value, out):
    """value broadcast to out's shape with out's strides, so that one flat offset indexes both:
    itself where it has them (a dense input and its torch.empty_like output do), else a copy."""
    if value.shape == out.shape and value.stride() == out.stride():
        return value
    return torch.empty_like(out, dtype=value.dtype).copy_(value.expand(out.shape))


def maximum(input, other):
    shape = torch.broadcast_shapes(input.shape, other.shape)
    out_dtype = torch.result_type(input, other)
    # Half types go through float32 copies (exact both ways): the interpreter keeps bfloat16 as
    # raw bits and converts its subnormals to signed zeros.
    compute_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    out = output_like((input, other), shape, compute_dtype)
    x = laid_out(input.to(compute_dtype), out)
    y = laid_out(other.to(compute_dtype), out)
    n = out.numel()
    if n:
        maximum_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out.to(out_dtype)
