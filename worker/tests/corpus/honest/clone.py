# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest copy op: clone copies element by element in a kernel (torch copies are not allowed
# for an operator that is itself a copy). The kernel reads the input through its strides, so a
# slice, a transposed or an expanded input is copied by value. The output has clone's layout
# (torch.empty_like with the memory_format asked, preserve_format by default: a dense input's
# strides, contiguous or channels_last otherwise) and is written through its own strides.
MAX_DIMS = 6


@triton.jit
def strided_copy_kernel(
    x_ptr,
    out_ptr,
    n,
    size1,
    size2,
    size3,
    size4,
    size5,
    stride0,
    stride1,
    stride2,
    stride3,
    stride4,
    stride5,
    out_stride0,
    out_stride1,
    out_stride2,
    out_stride3,
    out_stride4,
    out_stride5,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    rest = offsets.to(tl.int64)
    source = (rest % size5) * stride5
    target = (rest % size5) * out_stride5
    rest = rest // size5
    source += (rest % size4) * stride4
    target += (rest % size4) * out_stride4
    rest = rest // size4
    source += (rest % size3) * stride3
    target += (rest % size3) * out_stride3
    rest = rest // size3
    source += (rest % size2) * stride2
    target += (rest % size2) * out_stride2
    rest = rest // size2
    source += (rest % size1) * stride1
    target += (rest % size1) * out_stride1
    rest = rest // size1
    source += rest * stride0
    target += rest * out_stride0
    tl.store(out_ptr + target, tl.load(x_ptr + source, mask=mask), mask=mask)


def clone(input, memory_format=None):
    out = torch.empty_like(input, memory_format=memory_format or torch.preserve_format)
    if input.dim() > MAX_DIMS:
        raise ValueError(f"clone: at most {MAX_DIMS} dimensions, got {input.dim()}")
    padding = MAX_DIMS - input.dim()
    sizes = [1] * padding + list(input.shape)
    strides = [0] * padding + list(input.stride())
    out_strides = [0] * padding + list(out.stride())
    if input.numel():
        strided_copy_kernel[(triton.cdiv(input.numel(), 1024),)](
            input, out, input.numel(), *sizes[1:], *strides, *out_strides, BLOCK=1024
        )
    return out
