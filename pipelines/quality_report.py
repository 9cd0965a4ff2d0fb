"""Job task (pipelines/cdc_medallion.job.yml): the quality report of the pipeline's event log.

Runs `cdc-medallion report --event-log-table <catalog.schema.table> --tables-schema <catalog.schema>
--output <dir>` (the arguments come from the job). The task's environment installs the project's
wheel (databricks.yml `artifacts`); the deployed bundle root also goes first on sys.path, so the
report matches the deployed files. The report itself is `cdc_medallion.quality.report`, behind
the CLI's `report`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    if importlib.util.find_spec("cdc_medallion.quality.report") is None:
        print(
            "cdc_medallion.quality.report is not available in this deployment: the quality report "
            "(`cdc-medallion report --event-log-table ... --output ...`) is not built yet",
            file=sys.stderr,
        )
        return 2
    from cdc_medallion.cli import main as cli

    return cli(["report", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
