"""opforge_worker command line.

python -m opforge_worker serve --connect ENDPOINT --device KIND|none
                               --role device|lint [--slots N|auto]
                               [--server-key FILE|KEY --key-file NAME.key_secret]
python -m opforge_worker catalog [--device K] [--json FILE] [--ops a,b] [--no-cache]
python -m opforge_worker validate PATH... --device KIND [--dtypes a,b] [--sets a,b]
                                  [--json OUT] [--timings] [--cache-dir DIR] [--no-sample-store]
                                  [--jobs N|auto]
python -m opforge_worker validate --backend PKG [--enable CALL] [--ops a,b] --device KIND
                                  [--dtypes a,b] [--sets a,b] [--json OUT] [--cache-dir DIR]
                                  [--jobs N|auto]
python -m opforge_worker fingerprint [--device K]
python -m opforge_worker lint FILE [--profile cuda|interpreter] [--op OP] [--wrapper NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

from opforge_worker import device_kinds, toolchain
from opforge_worker.contract import Outcome, WorkerRole


def resolve_slots(requested: int | str, device_kind: str) -> int:
    """The jobs a worker runs at once: ``requested``, or the device kind's count for auto."""
    if requested != "auto":
        return requested
    if device_kind == device_kinds.NO_DEVICE:
        return 1
    return device_kinds.lookup(device_kind).default_slots


def _slots(text: str) -> int | str:
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 or auto, got {text!r}")
    return int(text)


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _write_json(path: str, document) -> None:
    Path(path).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def _write_validation_json(path: str, device: str, fields: dict) -> None:
    """A validation's JSON: the device kind and its toolchain with fingerprint, then ``fields``."""
    tools = toolchain.collect(device)
    document = {"device_kind": device, "toolchain": tools}
    _write_json(path, {**document, "fingerprint": toolchain.fingerprint(tools), **fields})


def serve(args: argparse.Namespace) -> int:
    from opforge_worker import conformance, curve_keys
    from opforge_worker.connection import Worker, WorkerConfig
    from opforge_worker.jobs import handlers_for

    if args.role == WorkerRole.LINT and args.device != device_kinds.NO_DEVICE:
        raise ValueError("role 'lint' runs no device: use --device none")
    keys = curve_keys.resolve(args.server_key, args.key_file)
    tools = toolchain.collect(args.device)
    fingerprint = toolchain.fingerprint(tools)
    slots = resolve_slots(args.slots, args.device)
    # Run once per fingerprint (the report is kept), before any test job: the harness puts a
    # failure that a defect explains on the device (outcome device_defect).
    report = (
        conformance.probe_toolchain(args.device, fingerprint)
        if args.role == WorkerRole.DEVICE and args.device in device_kinds.KINDS
        else None
    )
    defects = tuple(report.defects) if report is not None else ()
    handlers, release = handlers_for(args.role, args.device, slots, defects)
    config = WorkerConfig(
        endpoint=args.connect,
        role=args.role,
        device_kind=args.device,
        slots=slots,
        toolchain=tools,
        fingerprint=fingerprint,
        curve=keys,
        conformance=report,
    )
    worker = Worker(config, handlers, release)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: worker.stop(signal.strsignal(number)))
    worker.run()
    # Everything that must outlive the process is done: the goodbye left, the candidates are
    # dead. Finalizing the interpreter would collect the judge's heap (torch, the OpInfo
    # database, prepared samples): 18 s on a loaded 2-core host, past the supervisor's 5 s grace.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def catalog(args: argparse.Namespace) -> int:
    from opforge_worker import catalog as catalog_module

    built = catalog_module.require_known(
        catalog_module.build(
            args.device, ops=_csv(args.ops) if args.ops else None, use_cache=not args.no_cache
        )
    )
    print(catalog_module.format_table(built))
    if args.json:
        _write_json(args.json, built)
    return 0


def validate(args: argparse.Namespace) -> int:
    from opforge_worker import validate as validate_module

    if bool(args.backend) == bool(args.paths):
        raise ValueError("name candidate PATHs or --backend PKG, not both or neither")
    if args.backend:
        return validate_backend(args)
    if args.enable or args.ops:
        raise ValueError("--enable and --ops go with --backend")
    validation = validate_module.validate_paths(
        [Path(path) for path in args.paths],
        args.device,
        dtypes=_csv(args.dtypes) if args.dtypes else None,
        timeout_s=args.timeout_s,
        clock=validate_module.StartupClock.from_process_start(),
        sets=_csv(args.sets) if args.sets else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        sample_store=not args.no_sample_store,
        jobs=resolve_slots(args.jobs, args.device),
    )
    results = validation.results
    print(validate_module.format_table(results))
    if args.timings:
        for phase, seconds in validation.startup_s.items():
            print(f"start-up {phase}: {seconds:.2f}s", file=sys.stderr)
        print(f"start-up total: {sum(validation.startup_s.values()):.2f}s", file=sys.stderr)
    if args.json:
        _write_validation_json(
            args.json,
            args.device,
            {
                "results": results,
                "startup_s": validation.startup_s,
                "processes_started": validation.processes_started,
            },
        )
    return 0 if all(result["outcome"] == Outcome.PASS for result in results) else 1


def validate_backend(args: argparse.Namespace) -> int:
    from opforge_worker import validate as validate_module

    validation = validate_module.validate_backend(
        args.backend,
        args.device,
        enable=args.enable,
        dtypes=_csv(args.dtypes) if args.dtypes else None,
        timeout_s=args.timeout_s,
        sets=_csv(args.sets) if args.sets else None,
        ops=_csv(args.ops) if args.ops else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        jobs=resolve_slots(args.jobs, args.device),
    )
    print(validate_module.format_backend_table(validation))
    if args.json:
        _write_validation_json(
            args.json,
            args.device,
            {
                "backend": validation.backend,
                "registered": validation.registered,
                "overloads": validation.overloads,
                "results": validation.results,
            },
        )
    return 0 if validate_module.backend_passed(validation) else 1


def fingerprint(args: argparse.Namespace) -> int:
    tools = toolchain.collect(args.device)
    print(json.dumps({"toolchain": tools, "fingerprint": toolchain.fingerprint(tools)}, indent=1))
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="python -m opforge_worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = root.add_subparsers(dest="command", required=True)

    serving = commands.add_parser("serve", help="serve jobs from the daemon")
    serving.add_argument("--connect", required=True, help="the daemon's workers endpoint")
    serving.add_argument(
        "--device", required=True, choices=[*device_kinds.KINDS, device_kinds.NO_DEVICE]
    )
    serving.add_argument(
        "--slots",
        type=_slots,
        default="auto",
        help="jobs run at once: a count, or auto (the device kind's default_slots; the default)",
    )
    serving.add_argument("--role", required=True, choices=[r.value for r in WorkerRole])
    serving.add_argument(
        "--server-key",
        help="the daemon's public key: its NAME.key file or the key as Z85 (default: "
        "$OPFORGE_WORKER_SERVER_KEY); with it the worker authenticates with ZeroMQ CURVE",
    )
    serving.add_argument(
        "--key-file",
        help="the worker's own key pair, a NAME.key_secret file from `opforge keys generate NAME` "
        "(default: $OPFORGE_WORKER_KEY_FILE, or the secret key as Z85 in "
        "$OPFORGE_WORKER_SECRET_KEY)",
    )
    serving.set_defaults(run=serve)

    listing = commands.add_parser("catalog", help="list the operators and write them as JSON")
    listing.add_argument("--device", default="interpreter", choices=device_kinds.KINDS)
    listing.add_argument("--json", help="write the catalog here")
    listing.add_argument("--ops", help="only these operators, comma-separated")
    listing.add_argument("--no-cache", action="store_true", help="survey every operator afresh")
    listing.set_defaults(run=catalog)

    checking = commands.add_parser("validate", help="validate candidate files and directories")
    checking.add_argument("paths", nargs="*", metavar="PATH", help="a candidate file or directory")
    checking.add_argument(
        "--backend",
        metavar="PKG",
        help="judge this installed package through the dispatcher instead of candidate files",
    )
    checking.add_argument(
        "--enable",
        metavar="CALL",
        help="with --backend: the function that enables it (default: PKG.enable)",
    )
    checking.add_argument(
        "--ops",
        help="with --backend: only these OpInfos, comma-separated (default: the catalog's)",
    )
    checking.add_argument("--device", required=True, choices=device_kinds.KINDS)
    checking.add_argument("--dtypes", help="comma-separated; default: all the op supports")
    checking.add_argument(
        "--sets", help="sample sets, comma-separated; default: all (sample_sets.SETS)"
    )
    checking.add_argument("--json", help="write the results here")
    checking.add_argument("--timeout-s", type=float, default=60.0, help="per-sample time limit")
    checking.add_argument(
        "--jobs",
        type=_slots,
        default="auto",
        help="candidates judged at once, each in its own candidate process: a count, or auto "
        "(the device kind's default_slots, as a worker's --slots; the default)",
    )
    checking.add_argument(
        "--timings", action="store_true", help="print the start-up's phases to stderr"
    )
    checking.add_argument(
        "--cache-dir",
        help="where prepared samples are stored (default: $OPFORGE_CACHE_DIR, else "
        "$XDG_CACHE_HOME/opforge, else ~/.cache/opforge)",
    )
    checking.add_argument(
        "--no-sample-store",
        action="store_true",
        help="generate every sample afresh from the OpInfo database, storing none",
    )
    checking.set_defaults(run=validate)

    printing = commands.add_parser("fingerprint", help="print the toolchain and its fingerprint")
    printing.add_argument(
        "--device", default="interpreter", choices=[*device_kinds.KINDS, device_kinds.NO_DEVICE]
    )
    printing.set_defaults(run=fingerprint)
    return root


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lint"]:  # the linter owns its command line (opforge_worker.linter.cli)
        from opforge_worker.linter import cli

        return cli.main(argv[1:])
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.run(args)
    except (ValueError, RuntimeError) as error:
        print(f"opforge_worker {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
