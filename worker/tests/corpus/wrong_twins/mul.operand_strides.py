# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/mul.operand_strides.py, which fixes exactly its defect.
# Fix: every operand is expanded to the result's shape and copied into the output's layout unless
# it has that layout already, whatever its shape.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * y, mask=mask)


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


def mul_operand(value, out, compute_dtype):
    if not isinstance(value, torch.Tensor):
        value = torch.full((), value, dtype=compute_dtype, device=out.device)
    return laid_out(value.to(compute_dtype), out)


def mul(input, other):
    out_dtype = torch.result_type(input, other)
    compute_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    other_shape = other.shape if isinstance(other, torch.Tensor) else ()
    shape = torch.broadcast_shapes(input.shape, other_shape)
    operands = [value for value in (input, other) if isinstance(value, torch.Tensor)]
    out = output_like(operands, shape, out_dtype)
    x = mul_operand(input, out, compute_dtype)
    y = mul_operand(other, out, compute_dtype)
    n = out.numel()
    if n:
        mul_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
