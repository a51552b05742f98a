# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest elementwise kernel with scalar arguments: softplus(x) = log(1 + exp(beta * x)) / beta,
# and x itself where beta * x > threshold. An integral beta goes to the kernel as an int (Triton
# specializes an int argument equal to 1); the threshold goes as a one-element device tensor,
# built with torch.as_tensor from the host number.
@triton.jit
def softplus_kernel(x_ptr, out_ptr, threshold_ptr, beta, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    threshold = tl.load(threshold_ptr)
    scaled = x * beta
    # A select, not tl.minimum: on a GPU minimum(NaN, t) is t, and softplus(NaN) must be NaN.
    capped = tl.where(scaled > threshold, threshold, scaled)
    smooth = tl.log(1.0 + tl.exp(capped)) / beta
    y = tl.where(scaled > threshold, x, smooth)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def softplus(input, beta=1.0, threshold=20.0):
    beta_value = float(beta)
    beta_arg = int(beta_value) if beta_value.is_integer() else beta_value
    whole_threshold = isinstance(threshold, float) and threshold.is_integer()
    threshold_value = int(threshold) if whole_threshold else threshold
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    n = x.numel()
    if n:
        limit = torch.as_tensor(threshold_value, dtype=torch.float32, device=x.device)
        softplus_kernel[(triton.cdiv(n, 512),)](x, out, limit, beta_arg, n, BLOCK=512)
    return out
