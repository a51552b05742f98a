# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# erfc: 1 - erf(x) would lose every digit in the tail,
# so the Chebyshev-fitted form t * exp(-z*z + P(t)), t = 1 / (1 + z/2) (Numerical Recipes' erfcc,
# relative error below 1.2e-7 everywhere), with erfc(-z) = 2 - erfc(z).
BLOCK = 1024


@triton.jit
def erfc_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    z = tl.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    p = t * (-0.82215223 + t * 0.17087277)
    p = t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + p)))
    p = t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + p)))
    r = t * tl.exp(-z * z - 1.26551223 + t * (1.00002368 + p))
    y = tl.where(x < 0.0, 2.0 - r, r)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def erfc(input):
    x = input.contiguous()
    # Integer inputs give the default floating dtype, as ATen's floating unary ops do.
    dtype = input.dtype if torch.is_floating_point(input) else torch.get_default_dtype()
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        erfc_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
