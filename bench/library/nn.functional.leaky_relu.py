# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# nn.functional.leaky_relu: x above 0, slope * x elsewhere.
BLOCK = 1024


@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.where(x > 0.0, x, x * slope)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    x = input.contiguous()
    dtype = input.dtype
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, float(negative_slope), BLOCK=BLOCK)
    return out
