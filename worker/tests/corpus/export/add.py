# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest add, input + alpha * other with broadcasting and Python scalars: ATen's promotion picks
# the result dtype, floating inputs are computed in float32 (float64 for float64) and rounded once.
@triton.jit
def add_kernel(
    x_ptr,
    y_ptr,
    out_ptr,
    n,
    alpha,
    Y_SCALAR: tl.constexpr,
    FLOAT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr) if Y_SCALAR else tl.load(y_ptr + offsets, mask=mask)
    kind = out_ptr.dtype.element_ty
    if FLOAT:
        wide = tl.float64 if kind == tl.float64 else tl.float32
        result = x.to(wide) + alpha * y.to(wide)
    elif kind == tl.int1:
        result = (x.to(tl.int1) | y.to(tl.int1)) if alpha else x.to(tl.int1)
    else:
        result = x.to(kind) + alpha * y.to(kind)
    tl.store(out_ptr + offsets, result.to(kind), mask=mask)


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


def add(input, other, *, alpha=1):
    dtype = torch.result_type(input, other)
    if not isinstance(other, torch.Tensor):
        other = torch.tensor(other, dtype=dtype, device=input.device)
    shape = torch.broadcast_shapes(input.shape, other.shape)
    out = output_like((input, other), shape, dtype)
    x = laid_out(input.to(dtype), out)
    y_scalar = other.dim() == 0
    y = other.to(dtype) if y_scalar else laid_out(other.to(dtype), out)
    if out.numel():
        add_kernel[(triton.cdiv(out.numel(), 1024),)](
            x,
            y,
            out,
            out.numel(),
            alpha,
            Y_SCALAR=y_scalar,
            FLOAT=dtype.is_floating_point,
            BLOCK=1024,
        )
    return out
