"""``python -m opforge_library COMMAND ...``: the library's tools that need torch.

The daemon's CLI runs ``export`` after it fetched the library bundle; ``modelcheck`` runs on a
device host on its own. Each command lives in the module of its name and has a ``main(argv)``.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "export": "opforge_library.export",
    "modelcheck": "opforge_library.modelcheck",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        print(f"usage: python -m opforge_library {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[args[0]]).main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
