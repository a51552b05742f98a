# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest strided gather: flip over any dims of a tensor of any rank and layout. The shape, the
# input's strides (negated for flipped dims) and the output's strides go to the kernel as small
# device tensors built with torch.tensor; the kernel turns each output index into an input
# offset. Complex tensors are refused: tl.load has no complex dtypes.
COMPLEX_DTYPES = (torch.complex32, torch.complex64, torch.complex128)
MAX_RANK = tl.constexpr(8)


@triton.jit
def flip_kernel(
    x_ptr,
    out_ptr,
    sizes_ptr,
    in_strides_ptr,
    out_strides_ptr,
    start,
    n,
    RANK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    source = tl.zeros((BLOCK,), tl.int64) + start
    for d in tl.static_range(MAX_RANK):
        if d < RANK:
            size = tl.load(sizes_ptr + d)
            coordinate = (index // tl.load(out_strides_ptr + d)) % size
            source += coordinate * tl.load(in_strides_ptr + d)
    tl.store(out_ptr + index, tl.load(x_ptr + source, mask=mask), mask=mask)


def metadata(values: list[int], device: torch.device) -> torch.Tensor:
    """Host integers as an int64 tensor the kernel can read."""
    return torch.tensor(values, dtype=torch.int64, device=device)


def flip(input, dims):
    if input.dtype in COMPLEX_DTYPES:
        raise TypeError("flip: complex tensors are not supported by this Triton kernel")
    rank = input.dim()
    flipped = set()
    for d in dims:
        flipped.add(d % rank if rank else 0)
    sizes = list(input.shape)
    in_strides = list(input.stride())
    start = 0
    order = sorted(flipped)
    order.sort(reverse=True)
    for d in order:
        if sizes[d]:
            start += (sizes[d] - 1) * in_strides[d]
            in_strides[d] = -in_strides[d]
    out_strides = [1] * rank
    os = 1
    for d in range(rank - 1, -1, -1):
        out_strides[d] = os
        os *= max(sizes[d], 1)
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    n = out.numel()
    if n == 0:
        return out
    if rank == 0:
        sizes, in_strides, out_strides = [1], [0], [1]
    device = input.device
    flip_kernel[(triton.cdiv(n, 256),)](
        input,
        out,
        metadata(sizes, device),
        metadata(in_strides, device),
        metadata(out_strides, device),
        start,
        n,
        RANK=max(rank, 1),
        BLOCK=256,
    )
    return out
