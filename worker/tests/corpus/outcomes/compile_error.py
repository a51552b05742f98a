# compile_error: the source does not compile.
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr)
    pass


def exp(input):
    return input
