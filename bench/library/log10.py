# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# log10: log2(x) * log10(2), two roundings in float32.
BLOCK = 1024


@triton.jit
def log10_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # Computed in float32 and rounded once at the store; integers arrive as ATen converts them.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.log2(x) * 0.30102999566398120
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def log10(input):
    x = input.contiguous()
    # Integer inputs give the default floating dtype, as ATen's floating unary ops do.
    dtype = input.dtype if torch.is_floating_point(input) else torch.get_default_dtype()
    out = torch.empty(input.shape, dtype=dtype, device=input.device)
    n = x.numel()
    if n:
        log10_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
