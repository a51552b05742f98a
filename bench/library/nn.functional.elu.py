# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# nn.functional.elu: x above 0, alpha * expm1(x) elsewhere.
BLOCK = 1024


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
def elu_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.where(x <= 0.0, expm1_f32_kernel(x) * alpha, x)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def elu(input, alpha=1.0, inplace=False):
    x = input.contiguous()
    dtype = input.dtype
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        elu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, float(alpha), BLOCK=BLOCK)
    return out
