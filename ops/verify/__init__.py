"""Check every file of a segment, a partition dir or a whole log dir against the rules Kafka keeps.

The findings are facts an operator can act on, each a `Finding` with the file, the byte position, the
offsets concerned, a stable `kind` and one sentence. Errors are states Kafka would refuse, lose data
over or never write itself; warnings are states Kafka creates on purpose (a compacted range, a log start
moved by retention) or tolerates, printed so the log can be understood but not failing the check.

The package, top down:

  verifier     the Verifier: log dir -> partitions -> segments, and the order of every check
  walk         the segment walk (the hot path): batches, offset continuity and gaps, the unusual batch
  indexes      .index / .timeindex / .txnindex: read ahead, checked alone and entry by entry
  epochs       leader-epoch runs and the leader-epoch-checkpoint
  checkpoints  offset checkpoints, producer snapshots, meta.properties, partition.metadata
  targets      what a PATH is (resolve) and the file names of a log dir
  context      the options, summary and findings every check shares
  findings     Finding, Summary, KINDS and the sentences of findings
"""

from ops.verify.context import VerifyOptions
from ops.verify.findings import ERROR, KINDS, WARNING, Finding, Summary
from ops.verify.targets import NotKafkaPath, Target, resolve
from ops.verify.verifier import Verifier

__all__ = [
    "ERROR",
    "KINDS",
    "WARNING",
    "Finding",
    "NotKafkaPath",
    "Summary",
    "Target",
    "Verifier",
    "VerifyOptions",
    "resolve",
]
