# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# nn.functional.logsigmoid: min(x, 0) - log1p(exp(-|x|)), stable
# at both ends.
BLOCK = 1024


@triton.jit
def log1p_f32_kernel(x):
    # log(1 + x) loses what rounding 1 + x dropped; the first-order correction puts it back.
    u = 1.0 + x
    finite_nonzero = (u != 0.0) & (u - u == 0.0)
    y = tl.log(u) - tl.where(finite_nonzero, ((u - 1.0) - x) / u, 0.0)
    return tl.where(x == 0.0, x, y)  # log1p(-0.0) is -0.0


@triton.jit
def logsigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.where(x < 0.0, x, 0.0) - log1p_f32_kernel(tl.exp(-tl.abs(x)))
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def logsigmoid(input):
    x = input.contiguous()
    dtype = input.dtype
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        logsigmoid_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
