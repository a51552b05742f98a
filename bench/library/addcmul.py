# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# addcmul: input + value * tensor1 * tensor2, in ATen's order, in float32 for floating dtypes
# (rounded once at the store) and in integer arithmetic for integers. The three broadcast
# (expanded, then copied contiguous).
BLOCK = 1024


@triton.jit
def addcmul_kernel(
    x_ptr, t1_ptr, t2_ptr, out_ptr, n, value, IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    t1 = tl.load(t1_ptr + offsets, mask=mask)
    t2 = tl.load(t2_ptr + offsets, mask=mask)
    if IS_FLOAT:
        y = x.to(tl.float32) + value * t1.to(tl.float32) * t2.to(tl.float32)
    else:
        y = x.to(tl.int64) + value * t1.to(tl.int64) * t2.to(tl.int64)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def addcmul(input, tensor1, tensor2, *, value=1):
    dtype = torch.promote_types(torch.result_type(input, tensor1), tensor2.dtype)
    shape = torch.broadcast_shapes(input.shape, tensor1.shape, tensor2.shape)
    x = input.expand(shape).contiguous()
    t1 = tensor1.expand(shape).contiguous()
    t2 = tensor2.expand(shape).contiguous()
    out = torch.empty(shape, dtype=dtype, device=input.device)
    n = out.numel()
    if n:
        is_float = torch.is_floating_point(out)
        addcmul_kernel[(triton.cdiv(n, BLOCK),)](
            x,
            t1,
            t2,
            out,
            n,
            float(value) if is_float else int(value),
            IS_FLOAT=is_float,
            BLOCK=BLOCK,
        )
    return out
