"""The sample store: what it gives back is bit for bit what generating afresh gives, and nothing it
cannot vouch for is ever used."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from opforge_worker import opinfo as opinfo_db
from opforge_worker import sample_sets, sample_store, timing
from opforge_worker.layout_contract import contract as layout_contract
from opforge_worker.sample_store import OpMeta, SampleStore
from opforge_worker.samples import SampleCache

WORKER = Path(__file__).resolve().parents[1]
HONEST_EXP = WORKER / "tests" / "corpus" / "honest" / "exp.py"
WRONG_LAYOUT_NEG = WORKER / "tests" / "corpus" / "wrong" / "neg.contiguous_result.py"
#: (operator, variant, dtype): outputs that are tensors, tuples of them, torch's named tuples
#: (max.reduction_with_dim), Python values (item) and ops with an operand of its own dtype.
CASES = [
    ("exp", "", torch.float32),
    ("exp", "", torch.bfloat16),
    ("add", "", torch.int64),
    ("max", "reduction_with_dim", torch.float16),
    ("item", "", torch.float32),
    ("softmax", "with_dtype", torch.float32),
]


def _same(a, b, where="value"):
    """Bit-identical: the same types, tensors of the same dtype, shape, strides, storage
    offset and bytes (a NaN's payload and a zero's sign included)."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.stride(), a.storage_offset()) == (
            b.dtype,
            b.shape,
            b.stride(),
            b.storage_offset(),
        ), where
        bytes_a = a.detach().contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(bytes_a, b.detach().contiguous().reshape(-1).view(torch.uint8)), where
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{index}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif hasattr(a, "__dataclass_fields__"):
        for name, field in a.__dataclass_fields__.items():
            if field.init:
                _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, where


def _fresh(op, variant, dtype, seed, name):
    return SampleCache().samples(opinfo_db.find_opinfo(op, variant), dtype, seed, name)


@pytest.mark.parametrize(("op", "variant", "dtype"), CASES)
def test_stored_samples_are_bit_identical_to_fresh_ones(tmp_path, op, variant, dtype):
    meta = SampleCache(store=SampleStore(tmp_path)).find(op, variant)
    assert isinstance(meta, OpMeta)
    for name in sample_sets.SETS:
        for seed in (0, 1):
            written = SampleCache(store=SampleStore(tmp_path)).samples(meta, dtype, seed, name)
            # A new store object and cache: nothing is shared with the writer but the files.
            read = SampleStore(tmp_path).load(meta, dtype, seed, name)
            assert read is not None
            fresh = _fresh(op, variant, dtype, seed, name)
            _same(written, fresh, f"{op}.{variant} {dtype} {name} seed {seed} (written)")
            _same(read, fresh, f"{op}.{variant} {dtype} {name} seed {seed} (read)")
    assert any(SampleStore(tmp_path).load(meta, dtype, 0, name) for name in sample_sets.SETS)


def test_operators_metadata_is_op_db_s_and_a_damaged_copy_is_rebuilt(tmp_path, caplog):
    written = SampleStore(tmp_path).ops
    stored = SampleStore(tmp_path).ops  # read back
    assert stored == written
    path = SampleStore(tmp_path).directory / "ops.json"
    path.write_text(path.read_text().replace('"exp"', '"exq"', 1))
    assert SampleStore(tmp_path).ops == written
    assert "digest does not match" in caplog.text
    first = {}
    for opinfo in opinfo_db.load_op_db():
        first.setdefault((opinfo.name, opinfo.variant_test_name), opinfo)
    assert list(stored) == list(first)
    for key, opinfo in first.items():
        meta = stored[key]
        assert meta.aten_name == (opinfo.aten_name or opinfo.name)
        for device in ("cpu", "cuda"):
            assert meta.supported_dtypes(device) == set(opinfo.supported_dtypes(device)), key
        # Every rule chosen by the OpInfo's class chooses alike for its stand-in.
        assert opinfo_db.class_names(meta) == opinfo_db.class_names(opinfo), key
        assert layout_contract().preserves(meta) == layout_contract().preserves(opinfo), key
        assert timing.load().ladder(meta) == timing.load().ladder(opinfo), key
        assert sample_sets.is_value_safe(meta) == sample_sets.is_value_safe(opinfo), key
    assert any(layout_contract().preserves(meta) for meta in stored.values())


def _stored_file(store: SampleStore, meta, dtype, seed, name) -> Path:
    return store._path(sample_store._entry(meta, dtype, seed, name))


@pytest.mark.parametrize(
    "damage",
    ["flip a byte", "truncate", "another entry's file", "another key's file", "not a pickle"],
)
def test_a_damaged_or_foreign_file_is_rebuilt_never_used(tmp_path, damage, caplog):
    store = SampleStore(tmp_path)
    meta = store.ops[("exp", "")]
    cache = SampleCache(store=store)
    cache.samples(meta, torch.float32, 0, sample_sets.SAMPLE_INPUTS)
    cache.samples(meta, torch.float32, 1, sample_sets.SAMPLE_INPUTS)
    path = _stored_file(store, meta, torch.float32, 0, sample_sets.SAMPLE_INPUTS)
    data = path.read_bytes()
    if damage == "flip a byte":
        path.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
    elif damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "another entry's file":
        other = _stored_file(store, meta, torch.float32, 1, sample_sets.SAMPLE_INPUTS)
        path.write_bytes(other.read_bytes())
    elif damage == "another key's file":
        foreign = SampleStore(tmp_path)
        foreign.key = {**foreign.key, "torch": "0.0.0"}
        foreign.save(meta, torch.float32, 0, sample_sets.SAMPLE_INPUTS, [])
    else:
        body = b"cos\nsystem\n(S'true'\ntR."  # a pickle that would run a command

        path.write_bytes(
            b"opforge-samples\n" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
        )

    assert SampleStore(tmp_path).load(meta, torch.float32, 0, sample_sets.SAMPLE_INPUTS) is None
    assert "built again" in caplog.text and not path.exists()
    rebuilt = SampleCache(store=SampleStore(tmp_path)).samples(
        meta, torch.float32, 0, sample_sets.SAMPLE_INPUTS
    )
    _same(rebuilt, _fresh("exp", "", torch.float32, 0, sample_sets.SAMPLE_INPUTS))
    assert path.exists()


def test_any_change_of_toolchain_code_or_config_names_another_store(tmp_path, monkeypatch):
    base = SampleStore(tmp_path).directory
    settings = tmp_path / "tolerances.yaml"
    settings.write_text(sample_store.DEFAULT_SETTINGS_PATH.read_text() + "\n# changed\n")
    assert SampleStore(tmp_path, settings_path=settings).directory != base

    config = sample_sets.config()
    monkeypatch.setattr(
        sample_sets, "_config", sample_sets.SampleSetsConfig({**config.value_safe, "x": "y"}, {})
    )
    assert SampleStore(tmp_path).directory != base
    monkeypatch.undo()
    assert SampleStore(tmp_path).directory == base

    for key, value in [("torch_git", "another revision"), ("numpy", "0.0"), ("code", "0" * 64)]:
        store = SampleStore(tmp_path)
        changed = {**store.key, key: value}
        monkeypatch.setattr(sample_store, "store_key", lambda settings_path=None, k=changed: k)
        assert SampleStore(tmp_path).directory != base, key
        monkeypatch.undo()


def test_code_digest_covers_every_module_of_the_worker():
    digest = sample_store.store_key()["code"]
    modules = sorted(path.name for path in sample_store._PACKAGE.glob("*.py"))
    assert {"sample_sets.py", "samples.py", "judge.py", "transport.py"} <= set(modules)
    assert len(digest) == 64


_RUN = """
import json, sys
from pathlib import Path
from opforge_worker import validate
v = validate.validate_paths([Path(sys.argv[1])], "interpreter", dtypes=["float32"],
                            cache_dir=Path(sys.argv[2]))
print(json.dumps({"outcomes": [r["outcome"] for r in v.results],
                  "checks": [(r.get("failure") or {}).get("check") for r in v.results],
                  "tests": [r["tests_run"] for r in v.results],
                  "op_db": "torch.testing._internal.common_methods_invocations" in sys.modules}))
"""


def test_a_second_validate_imports_no_op_db_and_judges_alike(tmp_path):
    """Alike by every rule too: the wrong neg returns a contiguous result for a transposed input,
    which only the layout contract of its OpInfo class (elementwise) catches."""
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    shutil.copy(HONEST_EXP, candidates / "exp.py")
    shutil.copy(WRONG_LAYOUT_NEG, candidates / "neg.py")
    env = {**os.environ, "PYTHONPATH": str(WORKER), "TRITON_INTERPRET": "1"}
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _RUN, str(candidates), str(tmp_path / "cache")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    first, second = runs
    assert first["op_db"] and not second["op_db"]
    assert first["outcomes"] == second["outcomes"] == ["pass", "accuracy_error"]
    assert first["checks"] == second["checks"] == [None, "layout"]
    assert first["tests"] == second["tests"] and first["tests"][0] > 0
