"""Triton's compiled kernels kept per candidate source: stored by the judge alone, plain files
only, each source seeded with its own entries and nobody else's."""

import os
from pathlib import Path

import pytest
from harness_helpers import DEVICE, request, source

from opforge_worker.compile_cache import MAX_SOURCE_BYTES, CompileCache
from opforge_worker.harness import Harness


@pytest.fixture(autouse=True)
def compiling_process(monkeypatch):
    """Kernels loaded in this process compile: the modules that run exported packages on the
    interpreter set TRITON_INTERPRET for their whole process, which pytest-xdist may share."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


needs_cuda = pytest.mark.skipif(
    DEVICE != "cuda", reason="needs a CUDA device: only a GPU compiles, the interpreter runs Python"
)


def triton_entry(cache: Path, name: str, files: dict[str, bytes]) -> None:
    (cache / name).mkdir(parents=True)
    for file_name, data in files.items():
        (cache / name / file_name).write_bytes(data)


def test_entries_kept_for_a_source_are_found_for_that_source_only(tmp_path):
    store = CompileCache(tmp_path / "store", DEVICE)
    compiled = tmp_path / "first-run"
    triton_entry(compiled, "KEY1", {"k.cubin": b"\x7fELF", "__grp__k.json": b"{}"})

    assert store.keep("source a", compiled) == 2

    stored = store.use("source a")
    assert stored == store.directory("source a")
    assert (stored / "KEY1" / "k.cubin").read_bytes() == b"\x7fELF"
    assert store.use("source b") is None
    assert store.directory("source a") != store.directory("source b")


def test_a_revalidation_adds_only_what_was_compiled_anew(tmp_path):
    store = CompileCache(tmp_path / "store", DEVICE)
    compiled = tmp_path / "first-run"
    triton_entry(compiled, "KEY1", {"k.cubin": b"stored"})
    store.keep("source", compiled)
    again = tmp_path / "second-run"
    triton_entry(again, "KEY1", {"k.cubin": b"rewritten by the candidate process"})
    triton_entry(again, "KEY2", {"k.cubin": b"new specialization"})

    assert store.keep("source", again) == 1
    assert store.keep("source", again) == 0
    kept = store.directory("source")
    assert (kept / "KEY1" / "k.cubin").read_bytes() == b"stored"
    assert (kept / "KEY2" / "k.cubin").read_bytes() == b"new specialization"


def test_only_plain_files_are_kept(tmp_path):
    secret = tmp_path / "judge-secret"
    secret.write_text("api key")
    compiled = tmp_path / "run"
    triton_entry(compiled, "KEY1", {"k.cubin": b"code"})
    (compiled / "KEY1" / "leak").symlink_to(secret)
    (compiled / "LINKED").symlink_to(tmp_path)
    os.mkfifo(compiled / "KEY1" / "pipe")
    store = CompileCache(tmp_path / "store", DEVICE)

    store.keep("source", compiled)

    kept = store.directory("source")
    assert sorted(p.name for p in kept.iterdir()) == ["KEY1"]
    assert sorted(p.name for p in (kept / "KEY1").iterdir()) == ["k.cubin"]


def test_a_source_over_its_budget_keeps_nothing(tmp_path):
    compiled = tmp_path / "run"
    triton_entry(compiled, "KEY1", {"k.cubin": b"code"})
    triton_entry(compiled, "KEY2", {"huge": b"\0" * (MAX_SOURCE_BYTES + 1)})
    store = CompileCache(tmp_path / "store", DEVICE)

    assert store.keep("source", compiled) == 0
    assert not store.directory("source").exists()


def test_least_recently_used_sources_are_evicted_beyond_the_bound(tmp_path):
    store = CompileCache(tmp_path / "store", DEVICE, max_bytes=2500)
    for index, name in enumerate(("a", "b", "c")):
        compiled = tmp_path / f"run-{name}"
        triton_entry(compiled, "KEY", {"k.cubin": b"x" * 1000})
        store.keep(name, compiled)
        os.utime(store.directory(name), (index, index))
        if name == "b":
            store.use("a")  # a is used again after b was stored

    assert store.directory("a").exists() and store.directory("c").exists()
    assert not store.directory("b").exists()


#: What an honest exp also does: it writes into its own Triton cache directory, as Triton would,
#: and plants a link to a judge file there.
PLANTING = """
    entry = os.path.join(triton.knobs.cache.dir, "PLANTED")
    os.makedirs(entry, exist_ok=True)
    with open(os.path.join(entry, "kernel.bin"), "w") as stream:
        stream.write("from the planting source")
    if not os.path.lexists(os.path.join(entry, "leak")):
        os.symlink(SECRET, os.path.join(entry, "leak"))
"""


def planting_exp(secret: Path) -> str:
    planting = PLANTING.replace("SECRET", repr(str(secret)))
    return "import os\n" + source("honest/exp").replace(
        "def exp(input):\n", "def exp(input):" + planting
    )


def job_caches(harness: Harness) -> list[Path]:
    return sorted(harness.scratch_root.glob("process-*/jobs/*/triton-cache"))


def test_what_a_candidate_writes_reaches_only_its_own_next_validation(tmp_path):
    secret = tmp_path / "judge-secret"
    secret.write_text("api key")
    planting = planting_exp(secret)
    store = CompileCache(tmp_path / "store", DEVICE)

    # The planting source imports os, which the static gate refuses: what it tests is what
    # reaches the store from a candidate that runs.
    with Harness(DEVICE, compile_cache=store, static_gate=False) as harness:
        assert (
            harness.run_test({**request("honest/exp", "exp"), "source": planting})["outcome"]
            == "pass"
        )
    kept = store.directory(planting) / "PLANTED"
    assert (kept / "kernel.bin").read_text() == "from the planting source"
    assert not (kept / "leak").exists()

    with Harness(DEVICE, compile_cache=store, static_gate=False) as harness:
        assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
        assert (
            harness.run_test({**request("honest/exp", "exp"), "source": planting})["outcome"]
            == "pass"
        )
        other, again = job_caches(harness)
        assert not (other / "PLANTED").exists()  # another source never sees it
        assert (again / "PLANTED" / "kernel.bin").exists()  # planted again by its own run
    assert not (store.directory(source("honest/exp")) / "PLANTED").exists()


def test_the_store_is_out_of_the_candidates_reach(tmp_path):
    store = CompileCache(tmp_path / "store", DEVICE)
    target = store.directory(source("honest/exp")) / "PLANTED"
    target.mkdir(parents=True)
    writing = source("honest/exp").replace(
        "def exp(input):\n",
        f"def exp(input):\n    open({str(target / 'kernel.bin')!r}, 'w').write('x')\n",
    )

    with Harness(DEVICE, compile_cache=store, static_gate=False) as harness:  # `open` runs
        result = harness.run_test({**request("honest/exp", "exp"), "source": writing})

    assert result["outcome"] == "cheat_detected"
    assert "write outside the scratch directory refused" in result["failure"]["message"]
    assert not (target / "kernel.bin").exists()


@needs_cuda
def test_an_unchanged_source_is_not_compiled_again(tmp_path):
    store = CompileCache(tmp_path / "store", DEVICE)
    with Harness(DEVICE, compile_cache=store) as harness:
        assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
    stored = sorted(entry.name for entry in store.directory(source("honest/exp")).iterdir())

    with Harness(DEVICE, compile_cache=store) as harness:
        assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
        (compiled,) = job_caches(harness)
        # Read before the harness goes: closing it removes the candidate process's scratch.
        written = [path for path in compiled.rglob("*") if path.is_file()]

    # Triton writes an entry for every kernel it compiles (and every launcher it builds): the
    # second validation read all of them from the store and wrote none.
    assert stored
    assert written == []


#: A kernel to compile, loaded as the candidate process loads sources.
COPY_KERNEL = """
@triton.jit
def copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))
"""


def test_triton_reads_a_sources_entries_through_to_the_store(tmp_path, monkeypatch):
    # Triton's own compiler for an H100 (no GPU needed to compile): compile into the directory
    # that plays the store, then compile again in an empty directory that reads through to it.
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from opforge_worker.candidate import StoreBackedCacheManager, load_candidate

    (tmp_path / "kernel.py").write_text(COPY_KERNEL)
    kernel = load_candidate(tmp_path / "kernel.py")["copy_kernel"]
    monkeypatch.setattr(triton.knobs.cache, "manager_class", StoreBackedCacheManager)

    def compile_in(directory: Path, store: Path | None):
        monkeypatch.setattr(triton.knobs.cache, "dir", str(directory))
        monkeypatch.setattr(StoreBackedCacheManager, "store_dir", str(store or ""))
        signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}
        source = ASTSource(kernel, signature, constexprs={"BLOCK": 64})
        return triton.compile(source, target=GPUTarget("cuda", 90, 32))

    def files(directory: Path):  # a file Triton writes again gets a new inode
        return {p: p.stat().st_ino for p in directory.rglob("*") if p.is_file()}

    first = compile_in(tmp_path / "store", None)
    stored = files(tmp_path / "store")
    again = compile_in(tmp_path / "job", tmp_path / "store")

    assert again.asm["cubin"] == first.asm["cubin"]
    assert stored and files(tmp_path / "store") == stored
    assert files(tmp_path / "job") == {}


def copy_source(block: int):
    from triton.compiler import ASTSource

    return lambda kernel: ASTSource(
        kernel,
        {"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": block},
    )


class LoadingProcess:
    """Loads sources and compiles their kernels (for an H100, no GPU needed) as the candidate
    process does: Triton's compiler behind LaunchCounter, each load in a Triton cache of its own."""

    def __init__(self, root: Path, monkeypatch, capacity: int = 256):
        import triton.compiler

        from opforge_worker.audit import CodeOwners
        from opforge_worker.checks import LaunchCounter, LoadedKernels
        from opforge_worker.device_kinds import lookup

        self.root, self.monkeypatch, self.loads = root, monkeypatch, 0
        self.compiles: list[str] = []
        self.loaded = LoadedKernels(capacity)
        counter = LaunchCounter(
            CodeOwners(root), lambda: self.compiles.append(self.name), lookup("cuda"), self.loaded
        )
        self.compile = counter._timed_compile(triton.compiler.compile)

    def load(self, name: str, text: str):
        """The source ``text`` loaded as ``name``; its Triton cache directory."""
        import hashlib

        import triton

        from opforge_worker.candidate import load_candidate

        self.loads += 1
        self.name = name
        path = self.root / f"load-{self.loads}" / "candidate.py"
        path.parent.mkdir()
        path.write_text(text)
        self.loaded.source = hashlib.sha256(text.encode()).hexdigest()
        self.monkeypatch.setattr(triton.knobs.cache, "dir", str(path.parent / "triton-cache"))
        self.kernel = load_candidate(path)["copy_kernel"]
        return path.parent / "triton-cache"

    def run(self, make_source):
        from triton.backends.compiler import GPUTarget

        return self.compile(make_source(self.kernel), target=GPUTarget("cuda", 90, 32))


def test_a_source_loaded_again_reuses_the_kernels_its_earlier_load_compiled(tmp_path, monkeypatch):
    process = LoadingProcess(tmp_path, monkeypatch)
    process.load("first", COPY_KERNEL)
    first = process.run(copy_source(64))

    cache = process.load("again", COPY_KERNEL)
    again = process.run(copy_source(64))
    other = process.run(copy_source(128))

    assert again is first  # not even Triton's cache was read: nothing written, nothing told
    assert process.compiles == ["first", "again"]  # the other specialization compiled
    assert other is not first and other.asm["ptx"] != first.asm["ptx"]
    assert [p.name for p in cache.rglob("*.ptx")] == ["copy_kernel.ptx"]


def test_no_source_reuses_a_kernel_another_source_compiled(tmp_path, monkeypatch):
    process = LoadingProcess(tmp_path, monkeypatch)
    process.load("first", COPY_KERNEL)
    first = process.run(copy_source(64))

    # The same kernel in a different source (one more line): compiled for that source.
    cache = process.load("other", COPY_KERNEL + "\nBLOCKS = 1\n")
    other = process.run(copy_source(64))

    assert process.compiles == ["first", "other"]
    assert other is not first
    assert [p.name for p in cache.rglob("*.cubin")] == ["copy_kernel.cubin"]


def test_loaded_kernels_keep_no_candidates_namespace_alive(tmp_path, monkeypatch):
    import gc
    import weakref

    process = LoadingProcess(tmp_path, monkeypatch)
    process.load("first", COPY_KERNEL + "\nTABLE = torch.zeros(4)\n")
    first = process.run(copy_source(64))
    table = weakref.ref(process.kernel.__globals__["TABLE"])

    process.load("other", COPY_KERNEL)  # the first source's namespace is no longer needed
    gc.collect()

    assert table() is None
    # What the launcher is built from is still there.
    assert first.src.signature == {"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}
    assert first.src.constants == {(2,): 64}


def test_loaded_kernels_beyond_the_bound_are_dropped_least_recent_first(tmp_path, monkeypatch):
    process = LoadingProcess(tmp_path, monkeypatch, capacity=1)
    process.load("first", COPY_KERNEL)
    process.run(copy_source(64))
    process.run(copy_source(128))  # drops BLOCK=64

    process.load("again", COPY_KERNEL)
    process.run(copy_source(128))
    process.run(copy_source(64))

    assert process.compiles == ["first", "first", "again"]


@needs_cuda
def test_a_source_validated_again_in_the_same_process_loads_no_kernel(tmp_path):
    store = CompileCache(tmp_path / "store", DEVICE)
    with Harness(DEVICE, compile_cache=store) as harness:
        first = harness.run_test(request("honest/exp", "exp"))
        again = harness.run_test(request("honest/exp", "exp"))

    assert first["outcome"] == again["outcome"] == "pass"
    # Loading a kernel from Triton's cache or the store counts as compile time; reusing the
    # kernels the first validation loaded costs none.
    assert first["compile_s"] > 0
    assert again["compile_s"] == 0.0


TWICE = """
def twice(x):
    return x
"""


def test_a_kernel_that_cannot_be_hashed_is_a_compile_error_as_before(tmp_path, monkeypatch):
    # Triton hashes a kernel's dependencies for its cache key, and refuses a plain Python
    # function called from a kernel there: the key of the loaded kernels is computed the same way.
    from opforge_worker.checks import BackendCompileError

    process = LoadingProcess(tmp_path, monkeypatch)
    process.load("first", COPY_KERNEL.replace("tl.load(x_ptr + offsets)", "twice(x_ptr)") + TWICE)
    with pytest.raises(BackendCompileError, match="RuntimeError: Unsupported function referenced"):
        process.run(copy_source(64))
    assert process.compiles == []
