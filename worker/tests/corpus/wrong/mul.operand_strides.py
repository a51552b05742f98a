# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: only an operand whose shape differs from the result's is expanded and copied; one that
# already has the result's shape is passed as it is and read as flat contiguous memory. A
# broadcast-expanded operand (stride 0), a transposed one or a strided slice of that shape reads
# the wrong elements.
# Must fail: accuracy_error in layouts (float32)
@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * y, mask=mask)


def mul_operand(value, shape, compute_dtype, device):
    if not isinstance(value, torch.Tensor):
        value = torch.full((), value, dtype=compute_dtype, device=device)
    if value.shape != shape:
        value = value.expand(shape).contiguous()
    return value.to(compute_dtype)


def output_like(operands, shape, dtype):
    """The output laid out as ATen lays out an elementwise result: like the first operand of the
    result's shape (torch.empty_like: its strides where it is dense), contiguous if none is."""
    for value in operands:
        if value.shape == shape:
            return torch.empty_like(value, dtype=dtype)
    return torch.empty(shape, dtype=dtype, device=operands[0].device)


def mul(input, other):
    out_dtype = torch.result_type(input, other)
    compute_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    other_shape = other.shape if isinstance(other, torch.Tensor) else ()
    shape = torch.broadcast_shapes(input.shape, other_shape)
    x = mul_operand(input, shape, compute_dtype, input.device)
    y = mul_operand(other, shape, compute_dtype, input.device)
    operands = [value for value in (input, other) if isinstance(value, torch.Tensor)]
    out = output_like(operands, shape, out_dtype)
    n = out.numel()
    if n:
        mul_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
