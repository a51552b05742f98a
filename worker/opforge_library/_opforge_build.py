"""The build backend of a package ``opforge export`` wrote (PEP 517, in the package's tree).

Copied beside the package's pyproject.toml. It needs nothing but the standard library, so
``pip install DIR`` works offline on any machine with torch and triton: no setuptools to fetch
or to have. It packs the one package directory (the one holding ``manifest.json``) into a pure
wheel whose name and version the manifest gives.

The wheel declares no dependencies: torch and triton are the machine's own, already installed
(the package imports them and says so when they are missing). A declared ``torch`` would make pip
resolve torch's own requirements as well (torch 2.13: ``setuptools>=77.0.3``): offline that fails
where the installed setuptools is older, and online pip upgrades setuptools in the user's
environment unasked.
"""

import base64
import hashlib
import json
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _package() -> tuple[Path, dict]:
    (manifest,) = HERE.glob("*/manifest.json")
    return manifest.parent, json.loads(manifest.read_text(encoding="utf-8"))


def _metadata(manifest: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {manifest['name']}",
        f"Version: {manifest['version']}",
        f"Summary: Triton kernels for {manifest['device_kind']} registered with torch.library",
        "Requires-Python: >=3.10",
    ]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    package, manifest = _package()
    name, version = manifest["name"], manifest["version"]
    dist_info = f"{name}-{version}.dist-info"
    files = {
        path.relative_to(HERE).as_posix(): path.read_bytes()
        for path in sorted(package.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    files[f"{dist_info}/METADATA"] = _metadata(manifest).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: opforge\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(path, data) for path, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
