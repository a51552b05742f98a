# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# where: OpInfo calls it as where(input, condition, other) for torch.where(condition, input,
# other). The three broadcast (expanded, then copied contiguous); input and other promote as
# ATen's do, a Python number at full precision; the selected value is converted once, exactly
# where both operands already have the result's type.
BLOCK = 1024


@triton.jit
def where_kernel(c_ptr, a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    condition = tl.load(c_ptr + offsets, mask=mask) != 0
    dtype = out_ptr.dtype.element_ty
    a = tl.load(a_ptr + offsets, mask=mask).to(dtype)
    b = tl.load(b_ptr + offsets, mask=mask).to(dtype)
    tl.store(out_ptr + offsets, tl.where(condition, a, b), mask=mask)


def operand(value, like):
    """A tensor for a Python number, at its full precision."""
    if isinstance(value, torch.Tensor):
        return value
    dtype = torch.float64 if isinstance(value, float) else None
    return torch.as_tensor(value, dtype=dtype, device=like.device)


def where(input, condition, other):
    other = operand(other, input)
    dtype = torch.result_type(input, other)
    shape = torch.broadcast_shapes(condition.shape, input.shape, other.shape)
    c = condition.expand(shape).contiguous()
    a = input.expand(shape).contiguous()
    b = other.expand(shape).contiguous()
    out = torch.empty(shape, dtype=dtype, device=input.device)
    n = out.numel()
    if n:
        where_kernel[(triton.cdiv(n, BLOCK),)](c, a, b, out, n, BLOCK=BLOCK)
    return out
