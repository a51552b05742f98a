# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest autotuned elementwise kernel: sigmoid, the way a model writes it for a GPU, with its
# exports and a self-test that must never run in the harness (it asks for a CUDA device, which
# the interpreter's torch does not have). Computed in float32, stored in the input's dtype.
__all__ = ["sigmoid"]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 256}, num_warps=2),
        triton.Config({"BLOCK_SIZE": 512}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
    ],
    key=["n_elements"],
)
@triton.heuristics(values={"EVEN": lambda args: args["n_elements"] % args["BLOCK_SIZE"] == 0})
@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    if EVEN:  # noqa: SIM108 (a constexpr branch: the even case compiles without a mask)
        x = tl.load(x_ptr + offsets)
    else:
        x = tl.load(x_ptr + offsets, mask=offsets < n_elements)
    y = 1.0 / (1.0 + tl.exp(-x.to(tl.float32)))
    if EVEN:
        tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty))
    else:
        tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=offsets < n_elements)


def sigmoid(input: torch.Tensor) -> torch.Tensor:
    dtype = input.dtype if input.is_floating_point() else torch.get_default_dtype()
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input, dtype=dtype)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    n_elements = x.numel()
    if n_elements:
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
        sigmoid_kernel[grid](x, out, n_elements)
    return out


if __name__ == "__main__":
    import time

    x = torch.randn(1 << 20, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(sigmoid(x), torch.sigmoid(x))
    start = time.perf_counter()
    sigmoid(x)
    torch.cuda.synchronize()
    print(f"sigmoid: {time.perf_counter() - start:.6f} s")
