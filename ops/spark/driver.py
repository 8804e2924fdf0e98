"""The driver program `kcli spark-audit --master CLUSTER` hands to spark-submit.

    spark-submit ... ops/spark/driver.py JOB.json

JOB.json holds the job's arguments and where to write the report (JSON); spark-submit supplies the
master and the configuration, so the job itself is the one local mode runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from ops.spark import jobs
from ops.spark.checks import AuditOptions


def main(args_path: str) -> None:
    args = orjson.loads(Path(args_path).read_bytes())
    spark = jobs.session_from_submit()
    try:
        report = jobs.run(
            spark,
            args["job"],
            args["archive"],
            options=AuditOptions.from_json(args["options"]),
            compacted_topics=tuple(args.get("compacted", ())),
            split_bytes=args.get("split_bytes"),
        )
    finally:
        spark.stop()
    Path(args["report"]).write_bytes(
        orjson.dumps({"records": report.to_json(), "exit_code": report.exit_code})
    )


if __name__ == "__main__":
    main(sys.argv[1])
