# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Hand-written for the bench library (bench/library/README.md), not LLM output.
# lerp: ATen's two-sided form, start + w (end - start) for w < 0.5 and end - (end - start)(1 - w)
# otherwise (exact at both ends), in float32, rounded once at the store. The weight is a tensor
# or a Python number; all three broadcast (expanded, then copied contiguous).
BLOCK = 1024


@triton.jit
def lerp_kernel(s_ptr, e_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    start = tl.load(s_ptr + offsets, mask=mask).to(tl.float32)
    end = tl.load(e_ptr + offsets, mask=mask).to(tl.float32)
    weight = tl.load(w_ptr + offsets, mask=mask).to(tl.float32)
    diff = end - start
    y = tl.where(tl.abs(weight) < 0.5, start + weight * diff, end - diff * (1.0 - weight))
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def lerp(input, end, weight):
    if not isinstance(weight, torch.Tensor):
        weight = torch.as_tensor(float(weight), dtype=torch.float64, device=input.device)
    shape = torch.broadcast_shapes(input.shape, end.shape, weight.shape)
    s = input.expand(shape).contiguous()
    e = end.expand(shape).contiguous()
    w = weight.expand(shape).contiguous()
    out = torch.empty(shape, dtype=input.dtype, device=input.device)
    n = out.numel()
    if n:
        lerp_kernel[(triton.cdiv(n, BLOCK),)](s, e, w, out, n, BLOCK=BLOCK)
    return out
