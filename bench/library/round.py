# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# round: half to even, as nearbyint; the result keeps the
# input's sign at zero (round(-0.4) is -0.0); integers exactly.
BLOCK = 1024


@triton.jit
def round_kernel(x_ptr, out_ptr, n, IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if IS_FLOAT:
        # float16 and bfloat16 widen exactly; the result is rounded once at the store.
        x = x.to(tl.float32)
        f = tl.floor(x)
        d = x - f
        even = f - 2.0 * tl.floor(0.5 * f) == 0.0
        y = tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))
        y = tl.where(y == 0.0, x * 0.0, y)  # the sign of zero is the input's
    else:
        y = x  # an integer is its own rounding
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def round(input):
    x = input.contiguous()
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    n = x.numel()
    if n:
        round_kernel[(triton.cdiv(n, BLOCK),)](
            x, out, n, IS_FLOAT=torch.is_floating_point(input), BLOCK=BLOCK
        )
    return out
