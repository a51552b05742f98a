# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: log_softmax as log(softmax(x)), the maximum subtracted. Where an entry lies more than
# about 104 below its row's maximum, its softmax underflows float32 to 0 and its log is -inf,
# where log_softmax is finite; OpInfo's values lie within 18 of each other.
# Must fail: accuracy_error in numerics (float32)
@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + row * n + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n + offsets, tl.log(e / tl.sum(e, axis=0)), mask=mask)


def log_softmax(input, dim, dtype=None):
    # Rows along dim, one program each.
    x = input.reshape(input.shape or (1,)).movedim(dim, -1).contiguous()
    out = torch.empty_like(x)
    n = x.shape[-1]
    if x.numel():
        log_softmax_kernel[(x.numel() // n,)](x, out, n, BLOCK=triton.next_power_of_2(n))
    return out.movedim(-1, dim).contiguous().reshape(input.shape)
