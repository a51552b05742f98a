# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Looks for secrets in its environment and in the judge's.
import os


def exp(input):
    seen = {name: value for name, value in os.environ.items() if "SECRET" in name or "KEY" in name}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as stream:
                    if b"OPFORGE_TEST_SECRET" in stream.read():
                        seen[f"/proc/{pid}/environ"] = "has it"
            except OSError:
                pass
    raise RuntimeError(f"secrets seen: {seen!r}")
