# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# nan_to_num: NaN, +inf and -inf replaced (by default with 0
# and the dtype's largest and lowest finite values); integers exactly.
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
def nan_to_num_kernel(
    x_ptr,
    out_ptr,
    n,
    nan_value,
    posinf_value,
    neginf_value,
    IS_FLOAT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if IS_FLOAT:
        # float16 and bfloat16 widen exactly; the result is rounded once at the store.
        x = to_float32_kernel(x)
        y = tl.where(x != x, nan_value, x)
        y = tl.where(x == float("inf"), posinf_value, y)
        y = tl.where(x == -float("inf"), neginf_value, y)
    else:
        y = x  # an integer is its own finite value
    tl.store(out_ptr + offsets, to_output_kernel(y, out_ptr.dtype.element_ty), mask=mask)


def laid_out(value, out):
    """value broadcast to out's shape with out's strides, so that one flat offset indexes both:
    itself where it has them (a dense input and its torch.empty_like output do), else a copy."""
    if value.shape == out.shape and value.stride() == out.stride():
        return value
    return torch.empty_like(out, dtype=value.dtype).copy_(value.expand(out.shape))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    out = torch.empty_like(input, dtype=input.dtype)
    x = laid_out(input, out)
    n = x.numel()
    if n:
        # Float arguments (float32 in the kernel): every default of float16, bfloat16 and float32 is
        # exact there; integers never read them.
        limits = torch.finfo(input.dtype) if torch.is_floating_point(input) else None
        nan_value = float(nan)
        posinf_value = float(posinf) if posinf is not None else (limits.max if limits else 0.0)
        neginf_value = float(neginf) if neginf is not None else (limits.min if limits else 0.0)
        nan_to_num_kernel[(triton.cdiv(n, BLOCK),)](
            x,
            out,
            n,
            nan_value,
            posinf_value,
            neginf_value,
            IS_FLOAT=torch.is_floating_point(input),
            BLOCK=BLOCK,
        )
    return out
