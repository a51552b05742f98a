"""The exporter end to end: a bundle of real kernels becomes a package that serves torch's public
API through torch.library on the interpreter (dispatch key CPU; CUDA where OPFORGE_TEST_DEVICE=cuda,
the GPU check's run), installs with pip into a fresh venv, and a BackendBench layout whose files
give the operators' results."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import msgpack
import pytest
import torch

from opforge_library import export
from opforge_worker import compare, contract, layout_contract, settings, validate
from opforge_worker.device_kinds import lookup
from opforge_worker.opinfo import find_opinfo, samples_for

DEVICE = os.environ.get("OPFORGE_TEST_DEVICE", "interpreter")
ON = "cuda" if DEVICE == "cuda" else "cpu"  # where the device's tensors live
KEY = "CUDA" if DEVICE == "cuda" else "CPU"
if DEVICE == "interpreter":
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton

WORKER = Path(__file__).resolve().parents[1]
CORPUS = WORKER / "tests" / "corpus"
PACKAGE = "opforge_test_kernels"
#: (kernel file, dtypes the bundle says it passed, its aten_overloads in either spelling; none
#: as an older library has them: the exporter traces the OpInfo itself)
KERNELS = [
    (CORPUS / "export" / "abs.py", ["float32", "int32"], []),
    (CORPUS / "export" / "add.py", ["float32", "int64"], ["aten.add.Tensor"]),
    (CORPUS / "export" / "sgn.py", ["float32"], ["aten::sgn"]),
    (CORPUS / "honest" / "t.py", ["float32"], ["aten.t.default"]),  # a view: listed, not served
]
PROOF = contract.ToolchainProof(
    fingerprint="0123456789abcdef",
    device_kind="interpreter",
    toolchain={"torch": torch.__version__},
    outcome="pass",
    tests_run=22,
    tests_passed=22,
    validated_at_ms=1,
)


def make_bundle(kernels=KERNELS, device_kind=DEVICE) -> contract.LibraryBundle:
    found = []
    for path, dtypes, overloads in kernels:
        (candidate,) = validate.read_candidates(path)
        found.append(
            contract.LibraryKernel(
                op=candidate.op,
                variant=candidate.variant,
                wrapper=candidate.wrapper,
                source=candidate.source,
                hash=f"{abs(hash(candidate.source)):016x}"[:16],
                dtypes=dtypes,
                aten_overloads=overloads,
                provenance={"origin": "campaign", "campaign_id": "c1", "model": "m"},
                proofs=[PROOF],
            )
        )
    return contract.LibraryBundle(
        device_kind=device_kind, fingerprint="0123456789abcdef", daemon_version="t", kernels=found
    )


def write_bundle(path: Path, bundle: contract.LibraryBundle) -> Path:
    path.write_bytes(msgpack.packb(bundle.to_dict()))
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export")
    bundle = write_bundle(root / "bundle.msgpack", make_bundle())
    out = root / "out"
    arguments = ["--bundle", str(bundle), "--format", "torch-library", "--out", str(out)]
    assert export.main([*arguments, "--name", PACKAGE, "--device-kind", DEVICE]) == 0
    return out


@pytest.fixture(scope="module")
def package(exported):
    sys.path.insert(0, str(exported))
    try:
        module = importlib.import_module(PACKAGE)
        yield module
        module.disable()
    finally:
        sys.path.remove(str(exported))
        sys.modules.pop(PACKAGE, None)


@pytest.fixture
def library(package):
    package.enable()
    package.reset_counts()
    yield package
    package.disable()


def assert_judged_equal(actual, expected, op="abs"):
    """The judge's verdict: within the dtype's tolerance of eager, NaN and zero signs included."""
    assert isinstance(actual, torch.Tensor) and type(actual) is torch.Tensor
    assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype)
    tolerance = settings.load_settings().tolerance(op, compare.dtype_name(expected.dtype))
    diff = compare.tensor_diff(actual.cpu(), expected.cpu(), tolerance)
    assert diff is None, diff


def test_the_manifest_lists_what_is_served_and_what_is_not_with_why(exported, package):
    manifest = json.loads((exported / PACKAGE / "manifest.json").read_text())
    assert package.covered() == sorted(manifest["covered"])
    assert {
        "aten.abs.default": "functional",
        "aten.abs_.default": "inplace",
        "aten.abs.out": "out",
        "aten.add.Tensor": "functional",
        "aten.add_.Tensor": "inplace",
        "aten.add.out": "out",
        "aten.sgn.default": "functional",
    }.items() <= {name: entry["kind"] for name, entry in manifest["covered"].items()}.items()
    assert manifest["covered"]["aten.add.out"]["functional"] == "aten.add.Tensor"
    assert manifest["covered"]["aten.abs.default"]["dtypes"] == ["float32", "int32"]
    assert "aten.t.default" not in manifest["covered"]
    assert "view" in manifest["unmapped"]["aten.t.default"]["reason"]
    assert (manifest["device_kind"], manifest["dispatch_key"]) == (DEVICE, KEY)
    assert manifest["triton_environment"] == lookup(DEVICE).triton_environment
    (abs_kernel,) = [k for k in manifest["kernels"].values() if k["op"] == "abs"]
    assert abs_kernel["provenance"]["campaign_id"] == "c1"
    assert abs_kernel["toolchains"][0]["fingerprint"] == PROOF.fingerprint
    assert manifest["exported_with"]["torch"] == torch.__version__


@pytest.mark.parametrize(
    ("op", "dtype"), [("abs", "float32"), ("abs", "int32"), ("add", "float32"), ("add", "int64")]
)
def test_the_public_api_runs_the_kernels_on_the_opinfo_samples(library, op, dtype):
    opinfo = find_opinfo(op)
    samples = samples_for(opinfo, ON, getattr(torch, dtype), 0)
    expected = []
    library.disable()
    for sample in samples:
        expected.append(opinfo.op(sample.input, *sample.args, **sample.kwargs))
    library.enable()
    for sample, reference in zip(samples, expected, strict=True):
        assert_judged_equal(opinfo.op(sample.input, *sample.args, **sample.kwargs), reference, op)
    served = library.call_counts()[f"aten.{op}.{'default' if op == 'abs' else 'Tensor'}"]
    # add's samples with a Python number for `other` reach add.Tensor in a kind no sample of
    # the judge's tested through the tensor path: they fall through (and are right, above).
    assert served == len(samples) if op == "abs" else 0 < served <= len(samples)


def test_in_place_and_out_write_through_the_kernel(library):
    x = torch.randn(4, 6, device=ON)
    expected = x.abs()  # ATen's here: counted below from zero
    library.reset_counts()

    y = x.clone()
    assert y.abs_() is y
    assert_judged_equal(y, expected)
    out = torch.empty(4, 6, device=ON)
    assert torch.abs(x, out=out) is out
    assert_judged_equal(out, expected)
    strided = torch.empty(6, 4, device=ON).t()  # a non-contiguous destination
    torch.abs(x, out=strided)
    assert_judged_equal(strided, expected)
    empty = torch.empty(0, device=ON)  # ATen resizes an empty out= (and lays it out): its own
    torch.abs(x, out=empty)
    assert_judged_equal(empty, expected)

    other = torch.randn(6, device=ON)
    z = x.clone()
    z.add_(other, alpha=2)
    summed = torch.empty(4, 6, device=ON)
    torch.add(x, other, alpha=2, out=summed)
    counts = library.call_counts()
    library.disable()
    assert_judged_equal(z, x + 2 * other)
    assert_judged_equal(summed, x + 2 * other)
    assert counts["aten.abs_.default"] == 1
    assert counts["aten.abs.out"] == 2
    assert counts["aten.add_.Tensor"] == counts["aten.add.out"] == 1


#: Inputs laid out as models lay them: transposed, channels_last, channels_last_3d (five
#: dimensions: beyond the copy kernel, left to ATen), a slice with a storage offset.
LAYOUTS = {
    "transposed": lambda: torch.randn(6, 4, device=ON).t(),
    "channels_last": lambda: torch.randn(2, 3, 4, 5, device=ON).to(
        memory_format=torch.channels_last
    ),
    "channels_last_3d": lambda: torch.randn(2, 3, 2, 4, 5, device=ON).to(
        memory_format=torch.channels_last_3d
    ),
    "offset_slice": lambda: torch.randn(5, 8, device=ON)[1:, 2:7],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_in_place_and_out_keep_the_layout_aten_gives(library, layout):
    torch.manual_seed(0)
    x = LAYOUTS[layout]()
    fresh = {
        "inplace": lambda: x.clone(),
        "out": lambda: torch.empty_strided(x.shape, x.stride(), device=ON),
        "empty out": lambda: torch.empty(0, device=ON),
        "contiguous out": lambda: torch.empty(x.shape, device=ON),
    }

    def run(kind, destination):
        if kind == "inplace":
            return destination.abs_()
        return torch.abs(x, out=destination)

    expected = {}
    library.disable()
    for kind, make in fresh.items():
        expected[kind] = run(kind, make())
    library.enable()
    library.reset_counts()
    for kind, make in fresh.items():
        destination = make()
        result = run(kind, destination)
        assert result is destination, kind
        reference = expected[kind]
        assert (result.shape, result.stride()) == (reference.shape, reference.stride()), kind
        assert torch.equal(result, reference), kind
    counts = library.call_counts()
    # Served where the copy kernel addresses the destination and the kernel's result (at most
    # four dimensions unless contiguous: the result has the input's layout, ATen's, so a
    # channels_last_3d one is beyond it too); an empty out= is ATen's to resize.
    beyond = x.dim() > 4
    assert counts["aten.abs_.default"] == (0 if beyond else 1)
    assert counts["aten.abs.out"] == (0 if beyond else 2)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_served_call_returns_the_layout_aten_gives(library, layout):
    torch.manual_seed(0)
    x = LAYOUTS[layout]()
    library.disable()
    expected = torch.abs(x)
    library.enable()
    library.reset_counts()

    result = torch.abs(x)

    assert result.shape == expected.shape
    assert layout_contract.layout_difference(result.stride(), expected) is None
    assert torch.equal(result, expected)
    # Served where ATen's layout is known without ATen: a single dense argument (its strides);
    # a strided slice's result is ATen's to lay out.
    dense = layout != "offset_slice"
    assert library.call_counts()["aten.abs.default"] == (1 if dense else 0)


def test_a_result_of_another_layout_than_atens_is_answered_by_aten(library, monkeypatch):
    (module,) = [k for k, v in library.manifest["kernels"].items() if v["op"] == "abs"]
    library.disable()
    honest = library._library.wrapper(module)

    def contiguous_result(input):
        return honest(input.contiguous())

    monkeypatch.setitem(library._library._wrappers, module, contiguous_result)
    library.enable()
    transposed = LAYOUTS["transposed"]()
    with pytest.warns(RuntimeWarning, match="returned a layout other than ATen's"):
        result = torch.abs(transposed)
    assert result.stride() == transposed.stride()
    assert library.call_counts()["aten.abs.default"] == 0
    assert torch.abs(torch.randn(4, 6, device=ON)).is_contiguous()  # contiguous: served as is
    assert library.call_counts()["aten.abs.default"] == 1


def test_what_the_kernels_cannot_honour_falls_through_to_aten(library):
    wide = torch.randn(5, dtype=torch.float64, device=ON)  # not a dtype the kernel passed
    assert torch.equal(torch.abs(wide), wide.clone().abs_().detach())
    ints = torch.arange(-4, 4, dtype=torch.int32, device=ON)
    assert torch.equal(ints + 2.5, torch.arange(-4, 4, dtype=torch.float32, device=ON) + 2.5)
    # A number for a Tensor argument keeps ATen's promotion when it falls through: a 0-dim
    # float16 plus 2.5 stays float16.
    half = torch.tensor(1.0, dtype=torch.float16, device=ON) + 2.5
    assert (half.dtype, half.item()) == (torch.float16, 3.5)
    wrong_shape = torch.empty(3, device=ON)  # ATen resizes a non-empty out= with a warning
    with pytest.warns(UserWarning, match="resized"):
        torch.abs(torch.tensor([-1.0, 2.0], device=ON), out=wrong_shape)
    assert wrong_shape.tolist() == [1.0, 2.0]
    counts = library.call_counts()
    assert counts["aten.abs.default"] == counts["aten.abs.out"] == 0
    assert counts["aten.add.Tensor"] == 0
    mixed = torch.zeros(3, dtype=torch.int32, device=ON)
    with pytest.raises(RuntimeError, match="can't be cast"):
        mixed.add_(torch.ones(3, device=ON))  # float into int in place: ATen's own refusal
    assert library.call_counts()["aten.add_.Tensor"] == 0


def _transposed(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.mT if tensor.dim() >= 2 else tensor


ROUTED_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16)


@pytest.mark.parametrize("op", ["abs", "add", "sgn"])
def test_the_dispatcher_routing_serves_exactly_what_the_python_routing_serves(library, op):
    # Every routing sees every OpInfo sample of several dtypes and layouts, served or not: the
    # signature tokens _dispatch.cpp builds from the dispatcher's stack, and the device and
    # layout rules of its direct call, must be the runtime's.
    assert library.routing() == "native"
    opinfo = find_opinfo(op)
    counts, results = {}, {}
    try:
        for routing in ("direct call", "native", "python"):
            library.set_native_routing(routing != "python")
            library.set_direct_call(routing == "direct call")
            library.reset_counts()
            results[routing] = []
            for dtype in ROUTED_DTYPES:
                if dtype in opinfo.supported_dtypes(ON):
                    for sample in samples_for(opinfo, ON, dtype, 0):
                        for call in (sample, sample.transform(_transposed)):
                            result = opinfo.op(call.input, *call.args, **call.kwargs)
                            results[routing].append((result, result.stride()))
            counts[routing] = library.call_counts()
    finally:
        library.set_native_routing(True)
        library.set_direct_call(True)
    assert library.routing() == "native" and library.is_enabled()
    assert counts["direct call"] == counts["native"] == counts["python"]
    assert sum(counts["python"].values()) > 0
    for (direct, strides), (python, python_strides) in zip(
        results["direct call"], results["python"], strict=True
    ):
        assert_judged_equal(direct, python, op)
        assert strides == python_strides


def test_calls_routed_to_aten_and_functional_calls_served_never_enter_python(library, monkeypatch):
    overload_type = sys.modules[f"{PACKAGE}._runtime"].Overload
    entered = []
    serve = overload_type.__call__

    def counted(self, keyset, *args, **kwargs):
        entered.append(self.name)
        return serve(self, keyset, *args, **kwargs)

    monkeypatch.setattr(overload_type, "__call__", counted)
    wide = torch.randn(5, dtype=torch.float64, device=ON)  # not a dtype the kernel passed
    assert torch.equal(torch.abs(wide), wide.clone().abs_())
    assert entered == []
    library.reset_counts()
    torch.abs(wide.float())  # served, by its wrapper called from the dispatcher
    assert entered == [] and library.call_counts()["aten.abs.default"] == 1
    torch.abs(wide.float(), out=torch.empty(5, device=ON))  # out=: the Overload writes it
    assert entered == ["aten.abs.out"] and library.call_counts()["aten.abs.out"] == 1
    library.set_native_routing(False)
    try:
        torch.abs(wide)  # the same call, routed from Python: it enters, and ATen answers
        assert entered[1:] and set(entered[1:]) <= {"aten.abs.default", "aten.abs.out"}
    finally:
        library.set_native_routing(True)


def test_a_kernels_own_calls_never_reenter_the_library(library):
    x = torch.randn(7, device=ON)
    result = torch.sgn(x)
    counts = library.call_counts()
    library.disable()
    assert_judged_equal(result, torch.sgn(x))
    assert counts["aten.sgn.default"] == 1
    assert counts["aten.abs.default"] == 0  # sgn's wrapper called torch.abs: ATen's ran


def test_disable_and_enabled_restore_aten(package):
    x = torch.randn(3, device=ON)
    package.disable()
    package.reset_counts()
    torch.abs(x)
    assert package.call_counts()["aten.abs.default"] == 0
    with package.enabled():
        assert package.is_enabled()
        torch.abs(x)
    assert not package.is_enabled()
    torch.abs(x)
    assert package.call_counts()["aten.abs.default"] == 1


def test_only_the_interpreters_package_needs_the_interpreter(package, monkeypatch):
    package.disable()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if DEVICE == "interpreter":
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            package.enable()
        assert not package.is_enabled()
    else:
        package.enable()
        assert package.is_enabled()
        package.disable()


def test_a_kind_the_registry_lacks_exports_for_an_out_of_tree_device(tmp_path):
    bundle = write_bundle(tmp_path / "b.msgpack", make_bundle(KERNELS[:1], device_kind="npu"))
    out = tmp_path / "out"
    arguments = ["--bundle", str(bundle), "--format", "torch-library", "--out", str(out)]
    assert export.main(arguments) == 0
    manifest = json.loads((out / "opforge_kernels" / "manifest.json").read_text())
    assert (manifest["device_kind"], manifest["dispatch_key"]) == ("npu", "PrivateUse1")
    assert manifest["triton_environment"] == {}
    assert "\n    python -c" in (out / "README.md").read_text()


def test_the_interpreters_readme_sets_what_enable_demands(exported):
    readme = (exported / "README.md").read_text()
    assert ("TRITON_INTERPRET=1 python -c" in readme) == (DEVICE == "interpreter")


def test_pip_installs_the_package_into_a_fresh_venv(exported, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    python = venv / "bin" / "python"
    # This interpreter's torch and triton stand for the machine's installed ones.
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "machine.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "-q",
        "--disable-pip-version-check",
    ]
    # Offline, with build isolation: the package's own backend needs nothing to be fetched.
    install = [*pip, "install", "--no-index", str(exported)]
    subprocess.run(install, check=True, timeout=300, cwd=tmp_path)
    probe = subprocess.run(
        [
            python,
            "-c",
            f"import torch, {PACKAGE} as p\n"
            "p.enable()\n"
            f"x = torch.tensor([-1.5, 2.0, -0.0], device={ON!r})\n"
            "print(p.__file__, torch.abs(x).tolist(), p.call_counts()['aten.abs.default'])\n",
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            # Dependencies may come by PYTHONPATH (the GPU check's), the checkout's worker must not.
            "PYTHONPATH": os.pathsep.join(
                entry
                for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                if entry and not (Path(entry) / "opforge_library").exists()
            ),
            "TRITON_INTERPRET": "1" if DEVICE == "interpreter" else "0",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr
    where, values, count = (
        probe.stdout.split(" ", 1)[0],
        *probe.stdout.split(" ", 1)[1].rsplit(" ", 1),
    )
    assert where.startswith(str(site))
    assert values == "[1.5, 2.0, 0.0]"
    assert count.strip() == "1"


def test_pip_installs_offline_beside_a_torch_whose_own_requirements_are_not_met(exported, tmp_path):
    # A torch whose declared requirement (torch 2.13's setuptools>=77.0.3, here one no index
    # has) the environment does not meet: the package declares no dependency, so pip neither
    # resolves torch's requirements offline nor upgrades anything online.
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    for name, requires in (("torch", "setuptools>=999"), ("triton", "")):
        info = site / f"{name}-99.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 99.0\n"
            + (f"Requires-Dist: {requires}\n" if requires else "")
        )
        (info / "RECORD").write_text("")
    install = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    result = subprocess.run(
        [*install, "install", "--no-index", str(exported)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (info,) = site.glob(f"{PACKAGE}-*.dist-info")
    assert "Requires-Dist" not in (info / "METADATA").read_text()
    assert (site / PACKAGE / "manifest.json").is_file()
    # The stand-ins are as they were: nothing was upgraded or added beside them.
    assert sorted(p.name for p in site.glob("*.dist-info")) == sorted(
        [info.name, "torch-99.0.dist-info", "triton-99.0.dist-info"]
    )
    # And --target, as a user without a venv would.
    target = tmp_path / "target"
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-index"]
        + ["--target", str(target), str(exported)],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert (target / PACKAGE / "__init__.py").is_file()


def test_the_backendbench_layout_imports_and_gives_the_operators_results(tmp_path):
    bundle = write_bundle(tmp_path / "bundle.msgpack", make_bundle())
    out = tmp_path / "bb"
    assert (
        export.main(["--bundle", str(bundle), "--format", "backendbench", "--out", str(out)]) == 0
    )
    folders = sorted(path.name for path in out.iterdir() if path.is_dir())
    assert folders == ["abs__default", "add__Tensor", "sgn__default"]

    def impl(folder):
        path = out / folder / f"{folder}_implementation_v1.py"
        spec = importlib.util.spec_from_file_location(f"bb_{folder}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, f"{folder}_kernel_impl")

    x, y = torch.randn(3, 4, device=ON), torch.randn(4, device=ON)
    assert_judged_equal(impl("abs__default")(x), torch.abs(x))
    assert_judged_equal(impl("add__Tensor")(x, y, alpha=3), torch.add(x, y, alpha=3))
    manifest = json.loads((out / "manifest.json").read_text())
    assert "aten.t.default" in manifest["unmapped"]


def test_what_cannot_be_served_is_listed_with_its_reason(tmp_path):
    # exp's wrapper renamed to take two tensors: aten::exp gives one.
    source = (CORPUS / "honest" / "exp.py").read_text()
    path = tmp_path / "exp.py"
    path.write_text(source.replace("def exp(input)", "def exp(input, other)"))
    kernels = [
        (path, ["float32"], []),
        # diag reaches diag_embed (1-d inputs) and diagonal_copy (2-d): other operators
        (WORKER.parent / "config" / "examples" / "diag.py", ["float32"], []),
        (CORPUS / "honest" / "exp_upcast.py", ["bfloat16"], []),  # names no OpInfo
    ]
    bundle = write_bundle(tmp_path / "b.msgpack", make_bundle(kernels))
    out = tmp_path / "out"
    arguments = ["--bundle", str(bundle), "--format", "torch-library", "--out", str(out)]
    assert export.main(arguments) == 0
    manifest = json.loads((out / "opforge_kernels" / "manifest.json").read_text())
    assert manifest["covered"] == {}
    unmapped = manifest["unmapped"]
    assert "requires other" in unmapped["aten.exp.default"]["reason"]
    for name in ("aten.diag_embed.default", "aten.diagonal_copy.default"):
        assert unmapped[name]["reason"].startswith("another operator than diag's own")
    (upcast,) = [k for k in manifest["kernels"].values() if k["op"] == "exp_upcast"]
    assert upcast["problem"].startswith("no OpInfo 'exp_upcast'")


def test_bad_bundles_and_other_device_kinds_are_refused(tmp_path, capsys):
    garbage = tmp_path / "garbage.msgpack"
    garbage.write_bytes(b"\x93\x01")
    arguments = ["--format", "torch-library", "--out", str(tmp_path / "o")]
    assert export.main(["--bundle", str(garbage), *arguments]) == 2
    assert "not a library bundle" in capsys.readouterr().err
    bundle = write_bundle(tmp_path / "b.msgpack", make_bundle(KERNELS[:1], device_kind="cuda"))
    assert export.main(["--bundle", str(bundle), *arguments, "--device-kind", "interpreter"]) == 2
    assert "'cuda'" in capsys.readouterr().err


def test_the_packages_runtime_needs_only_torch_and_triton_and_its_build_nothing():
    allowed = {"__future__", "atexit", "bisect", "contextlib", "importlib", "json", "os"}
    allowed |= {"threading", "warnings", "collections.abc", "typing", "sys", "torch.utils"}
    allowed |= {"pathlib", "torch", "triton", "triton.language", "base64", "hashlib", "zipfile"}
    for module in [*export.RUNTIME_MODULES, export.BUILD_BACKEND]:
        tree = ast.parse((WORKER / "opforge_library" / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert {alias.name for alias in node.names} <= allowed, module
            elif isinstance(node, ast.ImportFrom):
                internal = node.level == 1 or node.module.split(".")[0] in {"torch", "triton"}
                assert internal or node.module in allowed, (module, node.module)


def _wrapper(signature: str):
    namespace: dict = {}
    exec(f"def wrapper{signature}:\n    pass\n", namespace)  # noqa: S102 (a signature only)
    return namespace["wrapper"]


@pytest.mark.parametrize(
    ("overload", "signature", "routes"),
    [
        ("aten.add.Tensor", "(input, other, *, alpha=1)", ["pos", "pos", "kw"]),
        ("aten.add.Tensor", "(input, other)", ["pos", "pos", "drop"]),
        ("aten.add.out", "(a, b, **kwargs)", ["pos", "pos", "kw", "dest"]),
        (
            "aten.sum.dim_IntList",
            "(input, dim=None, keepdim=False, *, dtype=None)",
            ["pos", "pos", "pos", "kw"],
        ),
        ("aten.sum.dim_IntList", "(input, *args)", ["pos", "pos", "pos", "drop"]),
        ("aten.softplus.default", "(input, beta=1, *, threshold=20)", ["pos", "pos", "kw"]),
    ],
)
def test_the_adapter_routes_each_schema_argument(overload, signature, routes):
    destination = "out" if overload.endswith(".out") else ""
    schema = export.resolve_overload(overload)._schema
    spec = export.adapter_spec(schema, _wrapper(signature), destination)
    assert [arg["to"] for arg in spec["args"]] == routes


def test_the_adapter_calls_the_wrapper_as_the_opinfo_does_and_names_what_it_cannot():
    from opforge_library._adapter import Adapter

    schema = export.resolve_overload("aten.add.Tensor")._schema
    adapter = Adapter(export.adapter_spec(schema, _wrapper("(input, other)")))
    assert adapter.wrapper_call(adapter.bind(("x", "y"), {})) == (["x", "y"], {})
    assert adapter.wrapper_call(adapter.bind(("x", "y"), {"alpha": True})) == (
        "the wrapper has no place for alpha=True"  # True is not the default 1
    )
    assert adapter.bind(("x",), {}) is None  # `other` is required
    assert adapter.bind(("x", "y"), {"beta": 2}) is None
    required = export.adapter_spec(schema, _wrapper("(input, other, scale)"))
    assert required == "the wrapper requires scale, which the schema does not give"
    missing = export.adapter_spec(schema, _wrapper("(input)"))
    assert missing == "the wrapper has no place for the schema's required other"


def test_a_kernel_that_raises_is_answered_by_aten_with_one_warning(library, monkeypatch):
    (module,) = [k for k, v in library.manifest["kernels"].items() if v["op"] == "abs"]

    def broken(input):
        raise ValueError("a shape the judge never sent")

    library.disable()
    library._library.wrapper(module)  # loaded, then replaced before enable() takes it
    monkeypatch.setitem(library._library._wrappers, module, broken)
    library.enable()
    x = torch.tensor([-1.0, 2.0], device=ON)
    with pytest.warns(RuntimeWarning, match="a shape the judge never sent"):
        assert torch.abs(x).tolist() == [1.0, 2.0]
    assert torch.abs(x).tolist() == [1.0, 2.0]
    assert library.call_counts()["aten.abs.default"] == 0


def _timing(dtype, shape_class, speedup, noise=0.02, fingerprint=PROOF.fingerprint, at=1):
    return contract.KernelTiming(
        fingerprint=fingerprint,
        device_kind=DEVICE,
        dtype=dtype,
        shape_class=shape_class,
        baseline="aten",
        kernel_us=10.0 / speedup,
        baseline_us=10.0,
        speedup=speedup,
        noise=noise,
        launch_bound=shape_class == "n<=4K",
        measured_at_ms=at,
    )


#: abs measured on the bundle's toolchain: slower than ATen on small float32 inputs, faster on
#: mid-sized ones, slower only within its noise up to 1M elements; int32 never timed. Timings of
#: another toolchain, and older ones, do not count.
ABS_TIMINGS = [
    _timing("float32", "n<=4K", 0.5, noise=0.05),
    _timing("float32", "n<=4K", 3.0, fingerprint="fedcba9876543210"),
    _timing("float32", "n<=64K", 0.6, at=1),
    _timing("float32", "n<=64K", 1.3, at=2),
    _timing("float32", "n<=1M", 0.97, noise=0.05),
    _timing("float32", "n<=16M", 0.9, noise=0.05),
]


@contextlib.contextmanager
def exported_package(root: Path, name: str, bundle: contract.LibraryBundle, *options: str):
    """``bundle`` exported as the package ``name`` under ``root``, imported, disabled after."""
    path = write_bundle(root / f"{name}.msgpack", bundle)
    out = root / name
    arguments = ["--bundle", str(path), "--format", "torch-library", "--out", str(out)]
    assert export.main([*arguments, "--name", name, *options]) == 0
    sys.path.insert(0, str(out))
    try:
        module = importlib.import_module(name)
        try:
            yield module
        finally:
            module.disable()
    finally:
        sys.path.remove(str(out))
        sys.modules.pop(name, None)


def _timed_abs_bundle() -> contract.LibraryBundle:
    bundle = make_bundle(KERNELS[:1])
    bundle.kernels[0].timings = ABS_TIMINGS
    return bundle


def test_timings_route_each_dtype_and_shape_class_and_the_manifest_says_why(tmp_path):
    with exported_package(tmp_path, "opforge_routed_kernels", _timed_abs_bundle()) as package:
        manifest = package.manifest
        assert manifest["shape_classes"][0] == {"name": "n<=4K", "max_elements": 4096}
        assert manifest["routing"] == {
            "min_speedup": 1.0,
            "untimed": "kernel",
            "unmeasured": "original",
            "launch_bound": "original",
        }
        routes = manifest["covered"]["aten.abs.default"]["routes"]
        assert manifest["covered"]["aten.abs_.default"]["routes"] == routes  # derived alike
        small, mid, large, huge = (routes["float32"][c] for c in manifest_classes(manifest)[:4])
        assert (small["to"], small["speedup"], small["fingerprint"]) == (
            "original",
            0.5,
            PROOF.fingerprint,
        )
        assert (mid["to"], mid["speedup"]) == ("kernel", 1.3)  # the newest timing
        assert (large["to"], large["speedup"]) == ("kernel", 0.97)  # slower within its noise
        assert (huge["to"], huge["speedup"]) == ("original", 0.9)
        # float32 is timed up to 16M: beyond, the benchmark never measured it, and the original
        # serves; int32 has no timing at all, and is served as proved.
        assert routes["float32"]["n>16M"] == {"to": "original", "speedup": None, "unmeasured": True}
        assert {route["to"] for route in routes["int32"].values()} == {"kernel"}

        package.enable()
        assert "aten.abs.default" in package.registered()
        for elements, served in [(10, 0), (4096, 0), (4097, 1), (70_000, 1)]:
            x = torch.randn(elements, device=ON)
            package.disable()
            expected = torch.abs(x)
            package.enable()
            package.reset_counts()
            assert torch.equal(torch.abs(x), expected)
            assert package.call_counts()["aten.abs.default"] == served, elements
        package.reset_counts()
        torch.abs(torch.arange(-3, 3, dtype=torch.int32, device=ON))
        assert package.call_counts()["aten.abs.default"] == 1  # untimed: served as proved


def manifest_classes(manifest: dict) -> list[str]:
    return [shape_class["name"] for shape_class in manifest["shape_classes"]]


def test_a_launch_bound_class_goes_to_the_original_however_fast_its_device_time(tmp_path):
    """There the device timer measured a launch: a served call pays the wrapper's and the
    runtime's host path, so only ``--launch-bound timed`` lets its speedup decide."""
    bundle = make_bundle(KERNELS[:1])
    bundle.kernels[0].timings = [_timing("float32", "n<=4K", 2.0)]
    assert bundle.kernels[0].timings[0].launch_bound
    for options, to in [((), "original"), (("--launch-bound", "timed"), "kernel")]:
        name = f"opforge_launch_{to}_kernels"
        with exported_package(tmp_path, name, bundle, *options) as package:
            small = package.manifest["covered"]["aten.abs.default"]["routes"]["float32"]["n<=4K"]
            assert (small["to"], small["speedup"], small["launch_bound"]) == (to, 2.0, True)
            package.enable()
            package.reset_counts()
            torch.abs(torch.randn(10, device=ON))
            assert package.call_counts()["aten.abs.default"] == (to == "kernel")


def test_untimed_calls_go_to_the_original_when_asked_and_unrouted_overloads_stay_unregistered(
    tmp_path,
):
    options = ["--untimed", "original", "--min-speedup", "1.2"]
    with exported_package(
        tmp_path, "opforge_strict_kernels", _timed_abs_bundle(), *options
    ) as package:
        routes = package.manifest["covered"]["aten.abs.default"]["routes"]
        assert package.manifest["routing"] == {
            "min_speedup": 1.2,
            "untimed": "original",
            "unmeasured": "original",
            "launch_bound": "original",
        }
        assert [routes["float32"][c]["to"] for c in manifest_classes(package.manifest)] == [
            "original",  # 0.5
            "kernel",  # 1.3
            "original",  # 0.97: slower than 1.2 even with its noise
            "original",
            "original",  # unmeasured
        ]
        assert {route["to"] for route in routes["int32"].values()} == {"original"}
        package.enable()
        package.reset_counts()
        torch.abs(torch.arange(-3, 3, dtype=torch.int32, device=ON))
        torch.abs(torch.randn(10, device=ON))
        torch.abs(torch.randn(5000, device=ON))
        assert package.call_counts()["aten.abs.default"] == 1  # the 64K class only

    # Nothing timed and nothing untimed served: no overload is registered at all.
    untimed = make_bundle(KERNELS[:1])
    with exported_package(tmp_path, "opforge_idle_kernels", untimed, "--untimed", "original") as (
        package
    ):
        package.enable()
        assert package.is_enabled() and package.registered() == []
        torch.abs(torch.randn(3, device=ON))
        assert sum(package.call_counts().values()) == 0
