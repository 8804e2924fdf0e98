"""`kcli recover logdir`: what Kafka's log loader does to a log dir after an unclean shutdown, planned
first and reported change by change, then done on request with every removed byte kept in a quarantine.

  plan     read-only: leftovers of interrupted compactions and deletes, segments validated batch by
           batch (cut at the first bad one, later segments dropped), indexes to rebuild, producer
           snapshots, leader-epoch-checkpoint and root offset checkpoints beyond the recovered end
  execute  the plan's changes in order: bytes to the quarantine (fsynced) first, a journal line before
           each action, then truncations, moves and atomic rewrites

`kcli recover partitions`: the unclean election of partitions whose whole ISR is gone, with each
candidate's loss known first.

  candidates  pure: KIP-966's ranking and Kafka's follower truncation, per candidate and replica
  online      gathering over the admin APIs (replica id -2) and from stopped brokers' log dirs
  unclean     --execute: quarantine topic, reorder and ElectLeaders UNCLEAN, what is left to do
"""

from ops.recover.execute import Executor, RecoverError
from ops.recover.plan import Change, PartitionPlan, Plan, plan_log_dir

__all__ = ["Change", "Executor", "PartitionPlan", "Plan", "RecoverError", "plan_log_dir"]
