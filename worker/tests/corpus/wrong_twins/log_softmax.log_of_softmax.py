# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/log_softmax.log_of_softmax.py, which fixes exactly its defect.
# Fix: (x - max) - log(sum(exp(x - max))): the log is taken of the sum, at least 1, never of an
# entry's share, which may underflow.
# Claims: float32
@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + row * n + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    total = tl.sum(tl.exp(shifted), axis=0)
    tl.store(out_ptr + row * n + offsets, shifted - tl.log(total), mask=mask)


def log_softmax(input, dim, dtype=None):
    # Rows along dim, one program each.
    x = input.reshape(input.shape or (1,)).movedim(dim, -1).contiguous()
    out = torch.empty_like(x)
    n = x.shape[-1]
    if x.numel():
        log_softmax_kernel[(x.numel() // n,)](x, out, n, BLOCK=triton.next_power_of_2(n))
    return out.movedim(-1, dim).contiguous().reshape(input.shape)
