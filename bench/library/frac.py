# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# frac: x - trunc(x) (frac(inf) is NaN, as in ATen).
BLOCK = 1024


@triton.jit
def frac_kernel(x_ptr, out_ptr, n, IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if IS_FLOAT:
        # float16 and bfloat16 widen exactly; the result is rounded once at the store.
        x = x.to(tl.float32)
        y = x - tl.where(x < 0.0, tl.ceil(x), tl.floor(x))
    else:
        y = x - x  # not reached: frac takes floats only
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def frac(input):
    x = input.contiguous()
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    n = x.numel()
    if n:
        frac_kernel[(triton.cdiv(n, BLOCK),)](
            x, out, n, IS_FLOAT=torch.is_floating_point(input), BLOCK=BLOCK
        )
    return out
