# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# cosh: (e + 1/e) / 2 below 20, and (exp(|x|/2) / 2) * exp(|x|/2) above,
# which stays finite as long as cosh does.
BLOCK = 1024


@triton.jit
def cosh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    a = tl.abs(x)
    e = tl.exp(a)
    h = tl.exp(0.5 * a)
    y = tl.where(a < 20.0, 0.5 * (e + 1.0 / e), (0.5 * h) * h)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def cosh(input):
    x = input.contiguous()
    # Integer inputs give the default floating dtype, as ATen's floating unary ops do.
    dtype = input.dtype if torch.is_floating_point(input) else torch.get_default_dtype()
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        cosh_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
