# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# sinc: sin(pi x) / (pi x), 1 at 0, with pi x rounded to
# float32 first as ATen does.
BLOCK = 1024


@triton.jit
def sinc_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    p = x * 3.141592653589793
    y = tl.where(x == 0.0, 1.0, tl.sin(p) / p)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def sinc(input):
    x = input.contiguous()
    # Integer inputs give the default floating dtype, as ATen's floating unary ops do.
    dtype = input.dtype if torch.is_floating_point(input) else torch.get_default_dtype()
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        sinc_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
