"""How `./dev test` spreads the files over its pytest-xdist workers (`--dist loadfile`).

xdist's loadfile keeps each file whole on one worker (its module-scoped brokers start once) but by
default queues the files with the most tests first, which puts the long interop files (a handful of
tests each, Apache Kafka clusters and JVM clients) last: the run ended on one worker finishing them
while the others idled. Here, instead:

- the files named in START_ORDER go first, in that order: the longest, as measured, the ones that run
  JVMs (Apache Kafka, its Java clients, Spark) mostly alternating with the ones that only wait on kcli
  processes, so that at the start two workers run JVMs and two do not; the others follow in collection
  order (on a run's per-file times this packing came within 1% of their sum over the workers, xdist's
  default order 8% above it);
- the files in one SHARED group run whole on one worker together, so the session-scoped Apache Kafka
  node and cluster of conftest (one per worker process) start once for all of them, not once per file.

The order is a measured guess, not a rule: a file missing from it only runs later. To measure it again:
`python -m pytest -n 4 --dist loadfile -p no:cacheprovider --junitxml=/tmp/suite.xml` and
`python scripts/suite_times.py /tmp/suite.xml` (each file's setup, calls and teardown summed).
"""

from __future__ import annotations

from pathlib import PurePath

import pytest
from xdist.scheduler import LoadFileScheduling

SHARED = {
    # kafka_cluster (test_apache_kafka, test_apache_kafka_ops) and kafka_node (test_apache_kafka,
    # test_scram): three JVMs and one, started once on one worker. test_apache_kafka_files runs a
    # Kafka node of its own, so it is a unit apart (together they held one worker for ~300 s).
    "test_apache_kafka": "apache-kafka",
    "test_apache_kafka_ops": "apache-kafka",
    "test_scram": "apache-kafka",
}

START_ORDER = (
    "apache-kafka",  # JVM
    "test_apache_kafka_files",  # JVM
    "test_metadata_snapshots",
    "test_apache_kafka_security",  # JVM
    "test_replication_cluster",
    # the first worker's next file (xdist queues one behind the running one): a short one behind the
    # longest unit, so that this worker does not end the run
    "test_cluster_faults",
    "test_txn_v2",  # JVM
    "test_cluster_clients",
    "test_authorization_matrix",  # JVM (added 2026-12-02 unmeasured: a secured Kafka and a kcli cluster)
    "test_client_quotas",  # JVM
    "test_java_clients",  # JVM
    "test_cluster",
    "test_group_migration",  # JVM (added 2026-12-02 unmeasured: Java consumers)
    "test_acls_cluster",  # (added 2026-12-02 unmeasured: a 3-node SASL_SSL cluster, ~60 s)
    "test_spark_audit",  # JVM
    "test_bad_input",
    "test_consumer_group_clients",  # JVM
    "test_fuzz",
    "test_acls",  # JVM
    "test_faults",
    "test_secure_cluster",  # JVM
    "test_broker_net",
    "test_spark_cluster",  # JVM
    "test_sasl_broker",
    # then the rest of 4 s or more, longest first (two 5-worker runs of 2026-12-03, e352657), so that no
    # file of 10-40 s is among the last: the others follow in collection order, the shortest
    "test_dynamic_keystore",
    "test_connection_limits",
    "test_reassign_cli",
    "test_txn_restart",
    "test_replication_throttle",
    "test_group_rebalance",
    "test_compaction",
    "test_recover_online",
    "test_clients",
    "test_elections",
    "test_transactions",
    "test_rack_cluster",
    "test_cluster_restart",
    "test_replay",
    "test_tls",
    "test_log_dirs",
    "test_txn_cluster",
    "test_raft_voters",
    "test_dir_safety",
    "test_reassignment",
    "test_elect_cli",
    "test_describe_topic_partitions",
    "test_ssl_cluster",
    "test_bad_input_admin",
    "test_fetch_sessions",
    "test_architecture",
    "test_elr_cluster",
    "test_idempotence",
    "test_metadata",
    "test_groups_cli",
    "test_txn_clients",
    "test_crash",
    "test_native",
    "test_admin_apis",
    "test_topics_cli",
    "test_groups",
    "test_native_json",
    "test_create_partitions_stall",
    "test_sasl_ssl_broker",
    "test_client_config",
    "test_recover",
    "test_envelope",
    "test_dynamic_configs",
)


def scope_of(nodeid: str) -> str:
    """The unit one worker runs whole: the file's SHARED group, else the file."""
    path = nodeid.split("::", 1)[0]
    return SHARED.get(PurePath(path).stem, path)


def start_rank(nodeid: str) -> int:
    scope = scope_of(nodeid)
    name = scope if scope in SHARED.values() else PurePath(scope).stem
    return START_ORDER.index(name) if name in START_ORDER else len(START_ORDER)


def order_items(items: list[pytest.Item]) -> None:
    """START_ORDER's units first; a stable sort, so every file keeps its tests in its own order."""
    items.sort(key=lambda item: start_rank(item.nodeid))


class SharedFileScheduling(LoadFileScheduling):
    """loadfile with SHARED files as one unit, queued in collection order (which order_items set on
    the workers), not by test count."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def schedule(self) -> None:
        reorder = self.config.option.loadscopereorder
        self.config.option.loadscopereorder = False
        try:
            super().schedule()
        finally:
            self.config.option.loadscopereorder = reorder
