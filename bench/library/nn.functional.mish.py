# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# opforge: wrapper=mish
# nn.functional.mish: x tanh(log1p(exp(x))).
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
def expm1_f32_kernel(x):
    # exp(x) - 1 cancels near zero: there a Taylor polynomial, whose first omitted term is far
    # below float32's rounding for |x| < 0.5.
    p = 1.0 / 40320.0 + x / 362880.0
    p = 1.0 / 720.0 + x * (1.0 / 5040.0 + x * p)
    p = 1.0 / 24.0 + x * (1.0 / 120.0 + x * p)
    p = 0.5 + x * (1.0 / 6.0 + x * p)
    p = x * (1.0 + x * p)
    return tl.where(tl.abs(x) < 0.5, p, tl.exp(x) - 1.0)


@triton.jit
def tanh_f32_kernel(x):
    # tanh(|x|) = t / (t + 2) with t = expm1(2|x|): no cancellation near zero; 1 beyond 20,
    # where t would overflow to inf / inf.
    a = tl.abs(x)
    t = expm1_f32_kernel(2.0 * a)
    r = tl.where(a > 20.0, 1.0, t / (t + 2.0))
    y = tl.where(x < 0.0, -r, r)
    return tl.where(x == 0.0, x, y)  # keeps -0.0


@triton.jit
def log1p_f32_kernel(x):
    # log(1 + x) loses what rounding 1 + x dropped; the first-order correction puts it back.
    u = 1.0 + x
    finite_nonzero = (u != 0.0) & (u - u == 0.0)
    y = tl.log(u) - tl.where(finite_nonzero, ((u - 1.0) - x) / u, 0.0)
    return tl.where(x == 0.0, x, y)  # log1p(-0.0) is -0.0


@triton.jit
def mish_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = to_float32_kernel(tl.load(x_ptr + offsets, mask=mask))
    y = x * tanh_f32_kernel(log1p_f32_kernel(tl.exp(x)))
    tl.store(out_ptr + offsets, to_output_kernel(y, out_ptr.dtype.element_ty), mask=mask)


def laid_out(value, out):
    """value broadcast to out's shape with out's strides, so that one flat offset indexes both:
    itself where it has them (a dense input and its torch.empty_like output do), else a copy."""
    if value.shape == out.shape and value.stride() == out.stride():
        return value
    return torch.empty_like(out, dtype=value.dtype).copy_(value.expand(out.shape))


def mish(input, inplace=False):
    dtype = input.dtype
    out = torch.empty_like(input, dtype=dtype)
    x = laid_out(input, out)
    n = x.numel()
    if n:
        mish_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
