# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# logaddexp2: max + log1p(2^-|a - b|) / ln 2; equal
# infinities give themselves.
# Operands broadcast (expanded, then copied into the output's layout where theirs differs) and promote as ATen's do; a Python
# number takes part at full precision.
BLOCK = 1024
NARROW_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


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
def widen_kernel(v, KIND: tl.constexpr):
    # The operation's type: 0 int64 (integers and bools; int32 results wrap as ATen's at the
    # store), 1 float32 (narrower floats widen exactly and round once at the store), 2 float64.
    if KIND == 0:
        w = v.to(tl.int64)
    elif KIND == 1:
        w = to_float32_kernel(v)
    elif v.dtype == tl.bfloat16:
        w = to_float32_kernel(v).to(tl.float64)
    else:
        w = v.to(tl.float64)
    return w


@triton.jit
def log1p_f32_kernel(x):
    # log(1 + x) loses what rounding 1 + x dropped; the first-order correction puts it back.
    u = 1.0 + x
    finite_nonzero = (u != 0.0) & (u - u == 0.0)
    y = tl.log(u) - tl.where(finite_nonzero, ((u - 1.0) - x) / u, 0.0)
    return tl.where(x == 0.0, x, y)  # log1p(-0.0) is -0.0


@triton.jit
def logaddexp2_kernel(a_ptr, b_ptr, out_ptr, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = widen_kernel(tl.load(a_ptr + offsets, mask=mask), KIND)
    b = widen_kernel(tl.load(b_ptr + offsets, mask=mask), KIND)
    m = tl.where(a < b, b, a)
    y = m + log1p_f32_kernel(tl.exp2(-tl.abs(a - b))) * 1.4426950408889634
    y = tl.where((a == b) & (tl.abs(a) == float("inf")), a, y)
    tl.store(out_ptr + offsets, to_output_kernel(y, out_ptr.dtype.element_ty), mask=mask)


def operand(value, like):
    """A tensor for a Python number, at its full precision (ATen computes with a scalar in the
    operation's type, not rounded to the tensor's dtype first)."""
    if isinstance(value, torch.Tensor):
        return value
    dtype = torch.float64 if isinstance(value, float) else None
    return torch.as_tensor(value, dtype=dtype, device=like.device)


def kind(dtype):
    """widen_kernel's KIND for an operation computed in dtype."""
    if dtype == torch.float64:
        return 2
    return 1 if dtype in NARROW_FLOATS else 0


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


def logaddexp2(input, other):
    other = operand(other, input)
    common = torch.result_type(input, other)
    dtype = common
    shape = torch.broadcast_shapes(input.shape, other.shape)
    out = output_like((input, other), shape, dtype)
    a = laid_out(input, out)
    b = laid_out(other, out)
    n = out.numel()
    if n:
        logaddexp2_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, KIND=kind(common), BLOCK=BLOCK)
    return out
