# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# lerp: ATen's two-sided form, start + w (end - start) for |w| < 0.5 and end - (end - start)(1 - w)
# otherwise (exact at both ends), in float64, rounded once at the store: there neither
# end - start nor its product with the weight overflows where the result does not (ATen fuses
# them into one fma; the interpreter's fma rounds between them). The weight is a tensor
# or a Python number; all three broadcast (expanded, then copied into the output's layout where theirs differs).
BLOCK = 1024


@triton.jit
def to_float32_kernel(v):
    # bfloat16 widens through its bits, exactly everywhere: the interpreter's own conversion
    # loses subnormals and their signs.
    if v.dtype == tl.bfloat16:
        w = (v.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        w = v.to(tl.float32)
    return w


@triton.jit
def to_output_kernel(y, dtype: tl.constexpr):
    # To bfloat16 rounded to nearest even through the bits (the interpreter truncates); to any
    # other dtype by conversion.
    if dtype == tl.bfloat16:
        u = y.to(tl.float32).to(tl.int32, bitcast=True)
        r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        r = tl.where(y != y, 0x7FC0, r)
        z = r.to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        z = y.to(dtype)
    return z


@triton.jit
def lerp_kernel(s_ptr, e_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    start = to_float32_kernel(tl.load(s_ptr + offsets, mask=mask)).to(tl.float64)
    end = to_float32_kernel(tl.load(e_ptr + offsets, mask=mask)).to(tl.float64)
    weight = to_float32_kernel(tl.load(w_ptr + offsets, mask=mask)).to(tl.float64)
    diff = end - start
    y = tl.where(tl.abs(weight) < 0.5, start + weight * diff, end - diff * (1.0 - weight))
    tl.store(out_ptr + offsets, to_output_kernel(y, out_ptr.dtype.element_ty), mask=mask)


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


def lerp(input, end, weight):
    if not isinstance(weight, torch.Tensor):
        weight = torch.as_tensor(float(weight), dtype=torch.float64, device=input.device)
    shape = torch.broadcast_shapes(input.shape, end.shape, weight.shape)
    out = output_like((input, end, weight), shape, input.dtype)
    s = laid_out(input, out)
    e = laid_out(end, out)
    w = laid_out(weight, out)
    n = out.numel()
    if n:
        lerp_kernel[(triton.cdiv(n, BLOCK),)](s, e, w, out, n, BLOCK=BLOCK)
    return out
