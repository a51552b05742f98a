# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/mul.operand_strides.py, which fixes exactly its defect.
# Fix: every operand is expanded to the result's shape and made contiguous, whatever its shape.
# Claims: bfloat16, float16, float32, int32, int64
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
    return value.to(compute_dtype).expand(shape).contiguous()


def mul(input, other):
    out_dtype = torch.result_type(input, other)
    compute_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    other_shape = other.shape if isinstance(other, torch.Tensor) else ()
    shape = torch.broadcast_shapes(input.shape, other_shape)
    x = mul_operand(input, shape, compute_dtype, input.device)
    y = mul_operand(other, shape, compute_dtype, input.device)
    out = torch.empty(shape, dtype=out_dtype, device=input.device)
    n = out.numel()
    if n:
        mul_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
