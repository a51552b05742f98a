# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# square: x * x; integers wrap as ATen's do.
BLOCK = 1024


@triton.jit
def square_kernel(x_ptr, out_ptr, n, IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if IS_FLOAT:
        # float16 and bfloat16 widen exactly; the result is rounded once at the store.
        x = x.to(tl.float32)
        y = x * x
    else:
        y = x * x
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def square(input):
    x = input.contiguous()
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    n = x.numel()
    if n:
        square_kernel[(triton.cdiv(n, BLOCK),)](
            x, out, n, IS_FLOAT=torch.is_floating_point(input), BLOCK=BLOCK
        )
    return out
