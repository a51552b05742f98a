"""Builds cassette.jsonl, the demo's replay cassette, from the answers under answers/<operator>/,
and optimize/cassette.jsonl, the optimize stage's, from optimize/answers/<operator>/.

The answers were written by the opforge developers, not by a model: every entry says so in its
`label` and its `model`, and the replay server labels every answer it serves as recorded. The first
answers carry the mistakes models make (a PyTorch fallback the linter rejects, a block size that
does not compile, a sign error that gives wrong values), so that the demo shows the whole loop.

Usage: python config/demo/build_cassette.py [--check]   (--check: fail if cassette.jsonl is stale)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LABEL = "hand-written replay answer, not from a live model"
MODEL = "opforge-demo (hand-written answers)"


#: Each cassette and the directory of its answers.
CASSETTES = {
    HERE / "cassette.jsonl": HERE / "answers",
    HERE / "optimize" / "cassette.jsonl": HERE / "optimize" / "answers",
}


def entries(answers_dir: Path) -> list[dict]:
    out = []
    for operator_dir in sorted(p for p in answers_dir.iterdir() if p.is_dir()):
        answers = sorted(operator_dir.glob("*.md"), key=lambda p: int(p.stem))
        for index, answer in enumerate(answers):
            out.append(
                {
                    "operator": operator_dir.name,
                    "index": index,
                    "label": LABEL,
                    "status": 200,
                    "response": {
                        "id": f"demo-{operator_dir.name}-{index}",
                        "object": "chat.completion",
                        "model": MODEL,
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": answer.read_text(encoding="utf-8"),
                                },
                                "finish_reason": "stop",
                            }
                        ],
                    },
                }
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if cassette.jsonl is stale")
    args = parser.parse_args()
    stale = False
    for target, answers_dir in CASSETTES.items():
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries(answers_dir))
        if not args.check:
            target.write_text(text, encoding="utf-8")
        elif not target.exists() or target.read_text(encoding="utf-8") != text:
            print(f"{target} is stale: run python {Path(__file__).name}", file=sys.stderr)
            stale = True
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
