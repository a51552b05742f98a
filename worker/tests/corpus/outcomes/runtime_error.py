# runtime_error: the wrapper raises.
def exp(input):
    raise ValueError("unsupported layout in exp wrapper")
