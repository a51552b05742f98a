#!/usr/bin/env python3
"""Samples per operator before and after the generated sample sets, from a catalog's JSON.

"Before" is OpInfo's ``sample_inputs`` alone (what a test drew until the sets came); "after" is
every set. Totals are over the catalog's operators and the dtypes each supports on the device.

    python -m opforge_worker catalog --device cuda --json catalog.json
    python bench/catalog_totals.py catalog.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def totals(catalog: dict) -> dict:
    by_set: Counter = Counter()
    per_operator_before, per_operator_after = [], []
    for entry in catalog["operators"]:
        counts = Counter()
        for sets in entry["sample_counts_by_set"].values():
            counts.update(sets)
        by_set.update(counts)
        per_operator_before.append(counts["sample_inputs"])
        per_operator_after.append(sum(counts.values()))
    return {
        "device_kind": catalog.get("device_kind"),
        "torch": catalog.get("torch"),
        "operators": len(catalog["operators"]),
        "samples_by_set": dict(by_set),
        "before_total": sum(per_operator_before),
        "after_total": sum(per_operator_after),
        "before_median_per_operator": statistics.median(per_operator_before or [0]),
        "after_median_per_operator": statistics.median(per_operator_after or [0]),
        "operators_gaining_samples": sum(
            after > before
            for before, after in zip(per_operator_before, per_operator_after, strict=True)
        ),
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    report = totals(json.loads(Path(sys.argv[1]).read_text()))
    print(json.dumps(report, indent=2))
    ratio = report["after_total"] / max(report["before_total"], 1)
    print(
        f"samples over all operators and dtypes: {report['before_total']} -> "
        f"{report['after_total']} ({ratio:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
