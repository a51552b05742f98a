"""Every linter rule catches its violation and accepts its near miss; obfuscations are caught."""

import textwrap

import pytest

from opforge_worker.linter import lint_source, load_profile
from opforge_worker.linter.profile import FORBIDDEN_ATTRIBUTE_RULE, HINT_FIELDS

# A clean candidate with three holes: module level, host code in the wrapper, kernel body.
TEMPLATE = """\
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
{kernel}
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)

{module}

def copy_wrapper(input):
    out = torch.empty_like(input)
{host}
    copy_kernel[(triton.cdiv(input.numel(), 128),)](input, out, input.numel(), BLOCK=128)
    return out
"""


def candidate(module="", host="", kernel=""):
    return TEMPLATE.format(
        module=textwrap.dedent(module).strip(),
        host=textwrap.indent(textwrap.dedent(host).strip() or "pass", "    "),
        kernel=textwrap.indent(textwrap.dedent(kernel).strip() or "pass", "    "),
    )


def lint(source, profile="interpreter"):
    return lint_source(source, op="copy", wrapper="copy_wrapper", profile=profile)


#: The report on a clean source: nothing to refuse, so the gate passes it.
CLEAN = {
    "ok": True,
    "violations": [],
    "syntax_error": None,
    "gate_outcome": "pass",
    "gate_check": "",
}


def rules_of(report):
    return {violation["rule"] for violation in report["violations"]}


WITHOUT_WRAPPER = candidate().replace("def copy_wrapper(input):", "def other_wrapper(input):")
NO_PARAMETERS = candidate().replace("def copy_wrapper(input):", "def copy_wrapper():")
VARARGS = candidate(host="input = args[0]").replace(
    "def copy_wrapper(input):", "def copy_wrapper(*args):"
)
WITHOUT_KERNEL = "def copy_wrapper(input):\n    return torch.empty_like(input)\n"
AT_LIMIT = load_profile("interpreter").max_source_chars
AT_CONFIG_LIMIT = load_profile("interpreter").max_autotune_configs


def autotuned(configs=2):
    """The template's kernel under @triton.autotune with ``configs`` configs."""
    listed = ", ".join(
        f"triton.Config({{'BLOCK': {64 << n}}}, num_warps=4)" for n in range(configs)
    )
    decorator = f"@triton.autotune(configs=[{listed}], key=['n'])\n@triton.jit"
    return (
        candidate()
        .replace("@triton.jit", decorator, 1)
        .replace(", BLOCK=128)", ")")
        .replace(
            "(triton.cdiv(input.numel(), 128),)", "lambda meta: (triton.cdiv(n, meta['BLOCK']),)"
        )
        .replace(
            "    out = torch.empty_like(input)",
            "    out = torch.empty_like(input)\n    n = input.numel()",
        )
    )


AUTOTUNED = autotuned()

# "rule id[ (variant)]" -> (violating source, near-miss source that must be clean)
CASES = {
    "import": (candidate(module="import numpy"), candidate(module="import math")),
    "class_definition": (
        candidate(module="class Box(torch.Tensor):\n    pass"),
        candidate(host="assert isinstance(input, torch.Tensor)"),
    ),
    "global_statement": (
        candidate(module="COUNT = 3", host="global COUNT"),
        candidate(module="COUNT = 3", host="n = COUNT"),
    ),
    "try_except": (
        candidate(host="try:\n    n = 1\nexcept Exception:\n    n = 2"),
        candidate(host="try:\n    n = 1\nfinally:\n    n = 2"),
    ),
    "async_code": (
        candidate(module="async def helper():\n    pass"),
        candidate(module="def helper():\n    pass"),
    ),
    "kernel_python": (
        candidate(kernel="while True:\n    break"),
        candidate(host="for size in input.shape:\n    break"),
    ),
    "generator": (
        candidate(host="yield out"),
        candidate(host="sizes = [size for size in input.shape]"),
    ),
    "forbidden_builtin": (candidate(host="n = eval('1')"), candidate(host="n = len(input.shape)")),
    "forbidden_module": (
        candidate(host="n = os.getpid()"),
        candidate(host="for os in range(2):\n    n = os"),
    ),
    "unavailable_module": (
        candidate(host="n = numpy.ceil(3 / 2)"),
        candidate(host="n = triton.cdiv(3, 2)"),
    ),
    FORBIDDEN_ATTRIBUTE_RULE: (
        candidate(host="v = input.item()"),
        candidate(host="v = input.numel()"),
    ),
    "dynamic_getattr": (
        candidate(host="s = getattr(input, 'sha' + 'pe')"),
        candidate(host="s = getattr(input, 'shape')"),
    ),
    "dunder": (candidate(host="c = input.__class__"), candidate(host="c = input.dtype")),
    "private_attribute": (candidate(host="c = input._base"), candidate(host="c = input.ndim")),
    "module_attribute": (
        candidate(host="s = torch.cuda.Stream()"),
        candidate(host="y = torch.empty_like(input)"),
    ),
    "fallback": (
        candidate(host="y = torch.sin(input)"),
        candidate(host="y, z = torch.broadcast_tensors(input, out)"),
    ),
    "module_alias": (candidate(host="t = torch"), candidate(host="t = torch.float32")),
    "module_scope": (
        candidate(host="b = tl.constexpr(4)"),
        candidate(kernel="b = tl.full((BLOCK,), 0, tl.int32)"),
    ),
    "host_method": (candidate(host="y = input.sin()"), candidate(host="y = input.view(-1)")),
    "host_attribute": (candidate(host="f = input.exp"), candidate(host="f = input.shape")),
    "host_transfer": (
        candidate(host="y = torch.empty(3, device='cpu')"),
        candidate(host="y = torch.empty(3, device=input.device)"),
    ),
    "module_state": (candidate(module="CACHE = {}"), candidate(module="BLOCK_SIZE = 1024")),
    "module_state (kernel global)": (
        candidate(module="SCALE = tl.constexpr(torch.float32)"),
        candidate(module="SCALE = tl.constexpr(2.0)", kernel="y = SCALE * offsets"),
    ),
    "attribute_assignment": (
        candidate(host="out.data = input"),
        candidate(host="data = input"),
    ),
    "tuning_argument": (
        AUTOTUNED.replace("key=['n']", "key=['n'], do_bench=lambda fn, quantiles: [0.0] * 3"),
        AUTOTUNED,
    ),
    "autotune_configs": (
        autotuned(AT_CONFIG_LIMIT + 1),
        autotuned(AT_CONFIG_LIMIT),
    ),
    "decorator": (
        candidate(host="@triton.jit\ndef nested_kernel(x):\n    return x"),
        candidate(module="@triton.jit\ndef helper_kernel(x):\n    return x"),
    ),
    "kernel_launch": (
        candidate(host="launcher = copy_kernel"),
        candidate(module="def launch(x):\n    copy_kernel[(1,)](x, x, 0, BLOCK=128)"),
    ),
    "wrapper_missing": (WITHOUT_WRAPPER, candidate()),
    "wrapper_duplicate": (
        candidate(module="def copy_wrapper(input):\n    return input"),
        candidate(),
    ),
    "wrapper_signature": (NO_PARAMETERS, VARARGS),
    "kernel_missing": (WITHOUT_KERNEL, candidate()),
    "source_too_large": (
        candidate().ljust(AT_LIMIT + 1, "#"),
        (candidate() + "\n").ljust(AT_LIMIT, "#"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_catches_its_violation(case):
    violating, _ = CASES[case]
    rule = case.split(" ")[0]
    report = lint(violating)
    assert not report["ok"]
    assert rule in rules_of(report), report["violations"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_accepts_its_near_miss(case):
    _, near_miss = CASES[case]
    assert lint(near_miss) == CLEAN


def test_every_rule_of_the_profiles_has_cases():
    every_rule = {
        "forbidden_builtin",
        "forbidden_module",
        "unavailable_module",
        FORBIDDEN_ATTRIBUTE_RULE,
    }
    every_rule |= set(HINT_FIELDS)
    for profile in ("cuda", "interpreter"):
        every_rule |= set(load_profile(profile).constructs)
    assert every_rule == {case.split(" ")[0] for case in CASES}


def test_view_ops_need_no_kernel_and_may_call_view_methods():
    view_only = "def diagonal_wrapper(input, offset=0):\n    return input.diagonal(offset)\n"
    report = lint_source(view_only, op="diagonal", wrapper="diagonal_wrapper", profile="cuda")
    assert report["ok"], report["violations"]
    # The same wrapper for an operator that computes needs a kernel; the view itself is allowed
    # (diagonal is a view for the dynamic check too: data/aten_kinds.yaml).
    report = lint_source(view_only, op="diag", wrapper="diagonal_wrapper", profile="cuda")
    assert rules_of(report) == {"kernel_missing"}


def test_value_dependent_ops_may_read_device_values_on_the_host():
    source = candidate(host="count = int(input.sum().item())").replace("copy_", "nonzero_")
    report = lint_source(source, op="nonzero", wrapper="nonzero_wrapper", profile="cuda")
    assert rules_of(report) == {"host_method"}  # .sum() still computes on the host
    report = lint_source(source, op="exp", wrapper="nonzero_wrapper", profile="cuda")
    assert rules_of(report) == {"host_method", FORBIDDEN_ATTRIBUTE_RULE}


def test_op_relaxations_match_the_harness():
    """The harness's data/tolerances.yaml and the linter must agree on which ops are relaxed."""
    import yaml

    from opforge_worker.settings import DEFAULT_SETTINGS_PATH

    harness = yaml.safe_load(DEFAULT_SETTINGS_PATH.read_text())
    profile = load_profile("cuda")
    assert profile.launch_exempt_ops == frozenset(harness["launch_exempt_ops"])
    assert profile.host_read_ops == frozenset(harness["host_read_ops"])


@pytest.mark.parametrize(
    "host, kernel",
    [
        ("assert input.device.type in ('cuda', 'cpu')", ""),
        ("grid = lambda meta: (triton.cdiv(input.numel(), meta['BLOCK']),)", ""),
        ("stride = input.stride(0) if input.dim() > 0 else 1", ""),
        ("shape = tuple(input.shape)\nsizes = [size for size in shape]", ""),
        ("half = input.dtype in (torch.float16, torch.bfloat16)", ""),
        ("", "y = tl.math.exp(offsets.to(tl.float32))"),
        ("", "y = tl.where(mask, tl.full((BLOCK,), float('-inf'), tl.float32), 0.0)"),
        ("", "y = tl.max(offsets, axis=0, propagate_nan=tl.PropagateNan.ALL)"),
        ("", "for i in tl.static_range(4):\n    y = i"),
    ],
)
def test_common_honest_idioms_are_accepted(host, kernel):
    """False positives cost an LLM call each: everyday Triton code must lint clean."""
    for profile in ("cuda", "interpreter"):
        report = lint(candidate(host=host, kernel=kernel), profile)
        assert report["ok"], report["violations"]


def test_libdevice_is_cuda_only():
    source = candidate(kernel="y = tl.extra.cuda.libdevice.tanh(offsets.to(tl.float32))")
    assert lint(source, "cuda")["ok"]
    report = lint(source, "interpreter")
    assert rules_of(report) == {"module_attribute"}
    # On cuda the model is pointed from the missing tl name to libdevice.
    hint = lint(candidate(kernel="y = tl.tanh(offsets)"), "cuda")["violations"][0]["hint"]
    assert "tl.extra.cuda.libdevice.tanh" in hint


# The obfuscations ANTI-CHEAT.md names: each must be caught, and by the rule that explains it.
OBFUSCATIONS = {
    "eval of a concatenated string": (
        candidate(host="y = eval('tor' + 'ch.s' + 'in')(input)"),
        "forbidden_builtin",
    ),
    "module alias": (candidate(host="t = torch\ny = t.sin(input)"), "module_alias"),
    "module alias at module level": (candidate(module="t = torch"), "module_alias"),
    "module passed as an argument": (candidate(host="y = len(torch)"), "module_alias"),
    "literal getattr chain": (
        candidate(host="y = getattr(getattr(torch, 'special'), 'airy_ai')(input)"),
        "module_attribute",
    ),
    "concatenated getattr chain": (
        candidate(host="y = getattr(getattr(torch, 'spec' + 'ial'), 'airy_ai')(input)"),
        "dynamic_getattr",
    ),
    "base64 and exec": (
        candidate(host="exec(base64.b64decode('eT10b3JjaC5zaW4oeCk='))"),
        "forbidden_builtin",
    ),
    "base64 module": (candidate(host="s = base64.b64decode('eA==')"), "forbidden_module"),
    "__builtins__": (candidate(host="f = __builtins__['ev' + 'al']"), "dunder"),
    "__import__": (candidate(host="m = __import__('os')"), "forbidden_builtin"),
    "globals()": (candidate(host="f = globals()['torch']"), "forbidden_builtin"),
    "lambda aliasing eval": (candidate(host="f = lambda: eval\ny = f()('1')"), "forbidden_builtin"),
    "def aliasing exec": (
        candidate(module="def run(code):\n    return exec(code)"),
        "forbidden_builtin",
    ),
    "function returning a torch op": (
        candidate(module="def pick():\n    return torch.special"),
        "module_attribute",
    ),
    "aten ops": (candidate(host="y = torch.ops.aten.sin.default(input)"), "fallback"),
    "torch.Tensor method": (candidate(host="y = torch.Tensor.sin(input)"), "fallback"),
    "torch.nn.functional": (candidate(host="y = torch.nn.functional.relu(input)"), "fallback"),
    "an aten op read, not called": (candidate(host="f = torch.ops.aten.sin"), "module_attribute"),
    "torch module dict": (candidate(host="f = torch.__dict__['sin']"), "dunder"),
    "vars of torch": (candidate(host="f = vars(torch)['sin']"), "forbidden_builtin"),
    ".numpy()": (candidate(host="a = input.numpy()"), FORBIDDEN_ATTRIBUTE_RULE),
    ".tolist()": (candidate(host="a = input.tolist()"), FORBIDDEN_ATTRIBUTE_RULE),
    ".item()": (candidate(host="a = input.sum().item()"), FORBIDDEN_ATTRIBUTE_RULE),
    ".cpu()": (candidate(host="a = input.cpu()"), FORBIDDEN_ATTRIBUTE_RULE),
    ".to('cpu')": (candidate(host="a = input.to('cpu')"), "host_transfer"),
    "uncalled method alias": (candidate(host="f = input.exp\ny = f()"), "host_attribute"),
    "getattr of a method": (candidate(host="y = getattr(input, 'exp')()"), "host_attribute"),
    "cuda stream": (candidate(host="s = torch.cuda.Stream()"), "module_attribute"),
    "stream context": (
        candidate(host="with torch.cuda.stream(torch.cuda.Stream()):\n    pass"),
        "module_attribute",
    ),
    "record_stream": (candidate(host="input.record_stream(None)"), FORBIDDEN_ATTRIBUTE_RULE),
    "tensor subclass": (
        candidate(module="class Fake(torch.Tensor):\n    pass"),
        "class_definition",
    ),
    "as_subclass": (candidate(host="y = out.as_subclass(torch.Tensor)"), FORBIDDEN_ATTRIBUTE_RULE),
    "_make_subclass": (
        candidate(host="y = torch.Tensor._make_subclass(torch.Tensor, out)"),
        "private_attribute",
    ),
    "private method": (candidate(host="y = out._make_subclass(out)"), "private_attribute"),
    "__torch_function__": (candidate(host="f = input.__torch_function__"), "dunder"),
    "type() class factory": (
        candidate(host="T = type('T', (torch.Tensor,), {})"),
        "forbidden_builtin",
    ),
    "global": (candidate(host="global out"), "global_statement"),
    "lru_cache": (
        candidate(module="@functools.lru_cache\ndef table(n):\n    return n"),
        "decorator",
    ),
    "try/except fallback": (
        candidate(host="try:\n    pass\nexcept Exception:\n    out = torch.exp(input)"),
        "try_except",
    ),
    "patching a module": (candidate(host="torch.exp = lambda x: x"), "attribute_assignment"),
    "patching an allowed name": (
        candidate(module="def fake(*args):\n    return None", host="torch.empty_like = fake"),
        "attribute_assignment",
    ),
    "deleting a module attribute": (candidate(host="del triton.cdiv"), "attribute_assignment"),
    "format string reading attributes": (
        candidate(host="s = '{0.__class__}'.format(input)"),
        "host_method",
    ),
    "setattr on a module": (candidate(host="setattr(triton, 'jit', None)"), "forbidden_builtin"),
    "rebinding tl": (candidate(module="tl = None"), "module_alias"),
    "shadowing torch by a parameter": (
        candidate(module="def helper(torch):\n    return torch"),
        "module_alias",
    ),
    "triton internals": (candidate(host="r = triton.runtime.driver"), "module_attribute"),
    "kernel with a dict": (candidate(kernel="table = {0: 1}"), "kernel_python"),
    "kernel raising": (candidate(kernel="raise ValueError('n')"), "kernel_python"),
    "tl internals": (candidate(kernel="c = tl.core.tensor"), "module_attribute"),
    "torch in a kernel": (candidate(kernel="y = torch.float32"), "module_scope"),
    "an import under another name": (candidate(module="import math as m"), "import"),
    "a cache from functools": (candidate(module="from functools import lru_cache"), "import"),
    "a relative import": (candidate(module="from . import helpers"), "import"),
    "a star import": (candidate(module="from math import *"), "import"),
    "a module of torch imported": (candidate(module="import torch.nn.functional"), "import"),
    "autotune configs in a constant bound twice": (
        AUTOTUNED.replace("@triton.autotune(configs=[", "CONFIGS = [1]\nCONFIGS = [", 1).replace(
            "], key=['n'])", "]\n\n\n@triton.autotune(configs=CONFIGS, key=['n'])", 1
        ),
        "autotune_configs",
    ),
    "autotune configs in a constant over the bound": (
        autotuned(AT_CONFIG_LIMIT + 1)
        .replace("@triton.autotune(configs=[", "CONFIGS = [", 1)
        .replace("], key=['n'])", "]\n\n\n@triton.autotune(configs=CONFIGS, key=['n'])", 1),
        "autotune_configs",
    ),
    "a tl dtype read in the wrapper is a value, a tl function is not": (
        candidate(host="y = tl.exp(input)"),
        "module_scope",
    ),
    "kernel launched at import": (
        candidate(module="copy_kernel[(1,)](None, None, 0, BLOCK=128)"),
        "kernel_launch",
    ),
    "kernel run method": (candidate(host="copy_kernel.run(input)"), "kernel_launch"),
    "host-side numpy": (candidate(host="a = np.exp(1.0)"), "unavailable_module"),
    "os environment": (candidate(host="e = os.environ"), "forbidden_module"),
    "module-level code": (candidate(module="print('import time')"), "module_state"),
    "main guard with an else": (
        candidate(module="if __name__ == '__main__':\n    pass\nelse:\n    t = 1"),
        "module_state",
    ),
    "main guard made true": (
        candidate(module="__name__ = '__main__'\nif __name__ == '__main__':\n    pass"),
        "dunder",
    ),
    "__all__ holding more than names": (candidate(module="__all__ = [torch]"), "dunder"),
    "module aliased by a local named like a module": (
        candidate(host="os = torch\ny = os.exp(input)"),
        "module_alias",
    ),
    "a local named like a module bound to a tensor computes": (
        candidate(host="os = input\ny = os.exp()"),
        "host_method",
    ),
    "a module name imported in a function": (
        candidate(module="def helper():\n    import os\n    return os.environ"),
        "forbidden_module",
    ),
    "a module name declared global": (
        candidate(module="def helper():\n    global os\n    os = 1\n    return os.environ"),
        "forbidden_module",
    ),
    "a builtin read in a comprehension's first iterable": (
        candidate(host="names = [type for type in type(input).mro()]"),
        "forbidden_builtin",
    ),
    "getattr on a local named like a module": (
        candidate(host="os = input\ny = getattr(os, 'exp')()"),
        "host_attribute",
    ),
    "torch's own sys": (candidate(host="m = torch.sys.modules"), "forbidden_module"),
    "torch's private C module": (
        candidate(host="m = torch._C._get_tracing_state"),
        "private_attribute",
    ),
    "tensor method behind a set rebound to a tensor": (
        candidate(host="s = set()\ns = input\ns.add(1)"),
        "host_method",
    ),
    "tensor method behind a parameter defaulting to a set": (
        candidate(module="def helper(s=set()):\n    return s.add(1)"),
        "host_method",
    ),
    "tensor method behind a comprehension variable": (
        candidate(host="r = [s.add(1) for s in [input]]"),
        "host_method",
    ),
    "tensor method after isinstance or": (
        candidate(host="r = isinstance(input, set) or input.add(1)"),
        "host_method",
    ),
    "tensor method after a walrus rebinding": (
        candidate(
            host="s = set()\nr = isinstance(s, set) and (s := input) is not None and s.add(1)"
        ),
        "host_method",
    ),
    "tensor sort on a tuple of shapes": (candidate(host="r = input.sort()"), "host_method"),
    "isinstance shadowed to fake a set": (
        candidate(
            host="isinstance = lambda *args: True\nr = isinstance(input, set) and input.add(1)"
        ),
        "host_method",
    ),
    "set rebound by augmented assignment": (
        candidate(host="s = set()\ns |= {1}\ns = input\ns.add(1)"),
        "host_method",
    ),
    "shadowed set constructor": (
        candidate(host="set = lambda: input\nr = set().add(1)"),
        "host_method",
    ),
    "annotation that calls": (
        candidate(module="def helper(x: torch.sin(1)):\n    return x"),
        "fallback",
    ),
    "annotation through a private name": (
        candidate(module="def helper(x: torch._C.Graph):\n    return x"),
        "private_attribute",
    ),
    "autotune below the kernel decorator": (
        AUTOTUNED.replace("@triton.autotune(", "@triton.jit\n@triton.autotune(", 1).replace(
            "key=['n'])\n@triton.jit", "key=['n'])", 1
        ),
        "decorator",
    ),
    "autotune called in the wrapper": (
        candidate(host="tuned = triton.autotune(configs=[], key=[])"),
        "decorator",
    ),
    "configs built elsewhere": (
        AUTOTUNED.replace("configs=[", "configs=CONFIGS + [", 1),
        "autotune_configs",
    ),
    "a config outside autotune": (
        candidate(host="c = triton.Config({'BLOCK': 64})"),
        "autotune_configs",
    ),
    "a config with a pre_hook": (
        AUTOTUNED.replace("num_warps=4)", "num_warps=4, pre_hook=print)", 1),
        "tuning_argument",
    ),
    "autotune benchmarking on a CUDA graph": (
        AUTOTUNED.replace("key=['n']", "key=['n'], use_cuda_graph=True"),
        "tuning_argument",
    ),
    "heuristics pruning configs": (
        AUTOTUNED.replace("key=['n']", "key=['n'], prune_configs_by={'top_k': 1}"),
        "tuning_argument",
    ),
}


@pytest.mark.parametrize("name", sorted(OBFUSCATIONS))
def test_obfuscation_is_caught(name):
    source, rule = OBFUSCATIONS[name]
    for profile in ("cuda", "interpreter"):
        report = lint(source, profile)
        assert not report["ok"]
        assert rule in rules_of(report), report["violations"]


# Honest code that earlier versions of the rules refused by its spelling: each must lint clean.
NEAR_MISSES = {
    "autotune and heuristics": AUTOTUNED.replace(
        "@triton.jit",
        "@triton.heuristics(values={'EVEN': lambda args: args['n'] % args['BLOCK'] == 0})\n"
        "@triton.jit",
        1,
    ),
    "heuristics with its values positional": candidate().replace(
        "@triton.jit",
        "@triton.heuristics({'WIDE': lambda args: triton.next_power_of_2(args['n']) > 1024})\n"
        "@triton.jit",
        1,
    ),
    "autotune with its configs positional": AUTOTUNED.replace("configs=[", "[", 1),
    "autotune resetting its output": AUTOTUNED.replace(
        "key=['n']", "key=['n'], reset_to_zero=['out_ptr']"
    ),
    "main guard": candidate(
        module="if __name__ == '__main__':\n"
        "    import time\n"
        "    x = torch.randn(4096, device='cuda')\n"
        "    print(torch.allclose(copy_wrapper(x), x), time.time())"
    ),
    "main guard written the other way round": candidate(
        module="if '__main__' == __name__:\n    print(copy_wrapper(torch.randn(3)))"
    ),
    "__all__": candidate(module="__all__ = ['copy_wrapper', 'copy_kernel']"),
    "__all__ as a tuple": candidate(module="__all__ = ('copy_wrapper',)"),
    "torch.tensor of a shape": candidate(
        host="shape = torch.tensor(input.shape, dtype=torch.int64, device=input.device)"
    ),
    "torch.as_tensor of a constant": candidate(
        host="one = torch.as_tensor(1.0, dtype=input.dtype, device=input.device)"
    ),
    "complex dtypes in a dtype table": candidate(
        module="COMPLEX = (torch.complex64, torch.complex128, torch.cfloat)",
        host="real_dtype = {torch.complex64: torch.float32, torch.complex128: torch.float64}\n"
        "assert input.dtype not in COMPLEX and input.dtype not in real_dtype",
    ),
    "loop variable named os": candidate(host="n = 0\nfor os in input.shape:\n    n += os"),
    "kernel loop variable named os": candidate(
        kernel="acc = tl.zeros((BLOCK,), tl.float32)\nfor os in range(0, n, BLOCK):\n    acc += os"
    ),
    "parameter named F": candidate(module="def features(F):\n    return F * 2"),
    "local named like a builtin": candidate(host="id = input.numel()\ntype = input.dtype"),
    "set.add": candidate(host="seen = set()\nfor d in range(input.dim()):\n    seen.add(d)"),
    "set comprehension's add": candidate(
        host="dims = {d for d in range(input.dim())}\ndims.add(0)"
    ),
    "list.sort": candidate(host="sizes = list(input.shape)\nsizes.sort()\nsizes.reverse()"),
    "sorted list": candidate(host="sizes = sorted(input.shape)\nsizes.remove(sizes[0])"),
    "float.is_integer narrowed by isinstance": candidate(
        module="def whole(alpha):\n    return isinstance(alpha, float) and alpha.is_integer()"
    ),
    "float.is_integer of float()": candidate(host="whole = float(input.numel()).is_integer()"),
    "float local": candidate(host="scale = 0.5\nscale = 2.0\nwhole = scale.is_integer()"),
    "dict.setdefault": candidate(host="seen = {}\nseen.setdefault(0, input.numel())"),
    "torch.device in annotations": candidate().replace(
        "def copy_wrapper(input):",
        "def copy_wrapper(input: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:",
    ),
    "torch.device annotating a local": candidate(host="device: torch.device = input.device"),
    "a string annotation": candidate(module="def helper(x: 'torch.dtype') -> int:\n    return 1"),
    # Forms of third-party kernel sets (issue 27): none changes what runs.
    "imports after a docstring": '"""copy."""\nfrom __future__ import annotations\n'
    + "import math\nfrom typing import Optional, Tuple\nimport functools\n"
    + "import torch\nimport triton\nimport triton.language as tl\n"
    + "from triton import language as tl\n"
    + candidate(host="n = math.ceil(functools.reduce(lambda a, b: a * b, input.shape, 1) / 2)"),
    "an import inside the wrapper": candidate(host="import math\nn = math.prod(input.shape)"),
    "autotune configs in a module constant": AUTOTUNED.replace(
        "@triton.autotune(configs=[", "CONFIGS = [", 1
    ).replace("], key=['n'])", "]\n\n\n@triton.autotune(configs=CONFIGS, key=['n'])", 1),
    "autotune configs as a comprehension": AUTOTUNED.replace(
        "configs=[triton.Config({'BLOCK': 64}, num_warps=4), "
        "triton.Config({'BLOCK': 128}, num_warps=4)]",
        "configs=[triton.Config({'BLOCK': b}, num_warps=w) for b in (64, 128) for w in (2, 4)]",
    ),
    "a kernel named freely": candidate().replace("copy_kernel", "_copy_impl"),
    "a torch to tl dtype table": candidate(
        module="TO_TL = {torch.float32: tl.float32, torch.int64: tl.int64}",
        host="element = TO_TL[input.dtype]",
    ),
    "torch view functions": candidate(
        host="a, b = torch.broadcast_tensors(input, out)\n"
        "v = torch.as_strided(input, input.shape, input.stride())\n"
        "r = input.real\nk = input.storage_offset()"
    ),
    "complex views": candidate(
        host="z = torch.view_as_complex(torch.view_as_real(torch.empty(2, dtype=torch.complex64)))"
    ),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_honest_near_miss_is_clean(name):
    for profile in ("cuda", "interpreter"):
        report = lint(NEAR_MISSES[name], profile)
        assert report == CLEAN, report


def test_the_report_says_what_the_gate_decides():
    fallback = lint(candidate(host="y = torch.exp(input)"))
    assert (fallback["gate_outcome"], fallback["gate_check"]) == ("cheat_detected", "fallback")
    assert "Compute it in a Triton kernel" in fallback["violations"][0]["hint"]
    # A cheat beside the fallback decides: it is the attempt to get around the checks.
    both = lint(candidate(host="y = torch.exp(input)\nz = input.__class__"))
    assert (both["gate_outcome"], both["gate_check"]) == ("cheat_detected", "static")
    form = lint(candidate(module="import numpy"))
    assert (form["gate_outcome"], form["gate_check"]) == ("lint_violation", "static")
    syntax = lint("def copy_wrapper(input:\n")
    assert (syntax["gate_outcome"], syntax["gate_check"]) == ("lint_violation", "static")


def test_autotune_config_hint_names_the_limit():
    (violation,) = lint(autotuned(AT_CONFIG_LIMIT + 1))["violations"]
    assert violation["rule"] == "autotune_configs"
    assert f"at most {AT_CONFIG_LIMIT} triton.Config(...)" in violation["hint"]


def test_a_main_guard_is_not_linted_but_an_else_branch_runs():
    guarded = "if __name__ == '__main__':\n    import os\n    os.system('ls')"
    assert lint(candidate(module=guarded))["ok"]
    # Without the guard the same lines are refused, for what they are.
    report = lint(candidate(module=guarded.replace("if __name__ == '__main__':", "if True:")))
    assert rules_of(report) == {"module_state", "forbidden_module"}


def test_violation_names_position_text_and_hint():
    report = lint(candidate(host="y = input.cpu()"))
    assert report["violations"] == [
        {
            "rule": FORBIDDEN_ATTRIBUTE_RULE,
            "line": 12,
            "col": 14,
            "text": ".cpu",
            "hint": load_profile("interpreter").forbidden_attributes["cpu"],
        }
    ]


def test_module_attribute_hint_suggests_the_allowed_spelling():
    report = lint(candidate(kernel="m = tl.maximun(offsets, 0)"))
    (violation,) = report["violations"]
    assert violation["text"] == "tl.maximun"
    assert violation["hint"].endswith("Did you mean tl.maximum?")
    assert "interpreter profile" in violation["hint"]


def test_columns_count_characters_not_bytes():
    report = lint(candidate(host="label = 'é'; y = input.cpu()"))
    (violation,) = report["violations"]
    assert (violation["line"], violation["col"]) == (12, 27)


def test_lines_are_counted_like_python_counts_them():
    # A form feed is whitespace to Python but a line break to str.splitlines.
    report = lint(candidate(host="n = 1 \f + 1\ny = input.cpu()"))
    (violation,) = report["violations"]
    assert (violation["line"], violation["text"]) == (13, ".cpu")


def test_many_violations_are_all_listed_quickly():
    source = candidate(host="\n".join(f"v{i} = eval('{i}')" for i in range(3000)))
    report = lint(source)
    assert len(report["violations"]) == 3000
    assert {violation["rule"] for violation in report["violations"]} == {"forbidden_builtin"}


def test_report_lists_every_violation_in_order_and_is_deterministic():
    source = candidate(module="import numpy", host="y = input.cpu()\nz = eval('1')")
    first = lint(source)
    assert [(v["line"], v["rule"]) for v in first["violations"]] == [
        (8, "import"),
        (12, FORBIDDEN_ATTRIBUTE_RULE),
        (13, "forbidden_builtin"),
    ]
    assert all(lint(source) == first for _ in range(3))


def test_syntax_error_is_reported_with_its_position():
    report = lint("def copy_wrapper(input):\n    return (input\n")
    assert report["ok"] is False
    assert report["violations"] == []
    assert report["syntax_error"]["line"] == 2
    assert report["syntax_error"]["col"] == 12
    assert "never closed" in report["syntax_error"]["message"]


@pytest.mark.parametrize(
    "source",
    [
        "x = 1\0",
        "x = " + "(" * 1000 + ")" * 1000,
        "x = " + "+".join(["a"] * 30000),
        "def f(x: " + " | ".join(["a"] * 30000) + "): pass",
    ],
    ids=["nul byte", "deep parentheses", "long expression chain", "long annotation"],
)
def test_hostile_sources_get_a_report_not_a_crash(source):
    report = lint(source)
    assert report["ok"] is False
    assert report["syntax_error"] is not None or report["violations"]


def test_profile_object_is_accepted_in_place_of_a_name():
    profile = load_profile("cuda")
    assert lint_source(candidate(), op="copy", wrapper="copy_wrapper", profile=profile)["ok"]
