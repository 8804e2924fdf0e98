"""`kcli recover logdir`: planted damage in copies of real log dirs (the fixture Kafka wrote, and one a
kcli broker wrote) is named exactly by the dry run, which changes nothing; --execute leaves a dir that
`kcli verify` passes and that loads without recovery work, with exactly the removed bytes in the
quarantine, from which `kcli replay` puts the records back."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import orjson
import pytest
from cli_in_process import run_kcli
from confluent_kafka import Consumer, Producer, TopicPartition

from formats.segment import walk
from formats.snapshot import read_snapshot
from kcli.broker.log.config import LogConfig
from kcli.broker.log.log import Log
from ops.recover import Executor, plan_log_dir
from ops.verify import Verifier, VerifyOptions, resolve
from tests.conftest import KCLI, REPO, kcli_env, start_broker, stop_cleanly

FIXTURE = REPO / "fixtures" / "logdir"
SEG0 = "00000000000000000000"


def hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def findings(root: Path) -> list:
    found: list = []
    Verifier(VerifyOptions(), found.append).run([resolve(root)])
    return found


def errors(root: Path) -> list:
    return [f for f in findings(root) if f.severity == "error"]


def verify_findings(root: Path) -> list:
    return findings(root)


def load_reports(log_dir: Path) -> list[str]:
    """What the broker's loader reports for every partition of `log_dir`, as an unclean start."""
    from formats.checkpoints import read_offset_checkpoint

    def checkpoint(name: str) -> dict:
        path = log_dir / name
        return read_offset_checkpoint(path.read_text()) if path.exists() else {}

    recovery, starts = (
        checkpoint("recovery-point-offset-checkpoint"),
        checkpoint("log-start-offset-checkpoint"),
    )
    lines: list[str] = []
    for path in sorted(log_dir.iterdir()):
        if not path.is_dir() or path.name.startswith("__cluster_metadata"):
            continue
        topic, _, partition = path.name.rpartition("-")
        key = (topic, int(partition))
        log = Log.load(
            path,
            LogConfig(),
            log_start_offset_checkpoint=starts.get(key, 0),
            recovery_point_checkpoint=recovery.get(key, 0),
            report=lines.append,
        )
        log.close()
    return lines


def recover_cli(*args: str) -> subprocess.CompletedProcess:
    """`kcli recover logdir ARGS` through kcli.cli.main.main in this process."""
    return run_kcli("recover", "logdir", *args)


def recover_cli_process(*args: str) -> subprocess.CompletedProcess:
    """`kcli recover logdir ARGS` as a real `python -m kcli` process: the entry point as installed."""
    return subprocess.run(
        [*KCLI, "recover", "logdir", *args], capture_output=True, text=True, env=kcli_env(), timeout=60
    )


# --- the fixture log dir --------------------------------------------------------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, dict]:
    """A copy of fixtures/logdir with one planted problem per partition; returns (dir, facts)."""
    root = tmp_path / "logdir"
    shutil.copytree(FIXTURE, root)
    facts: dict = {}

    # a torn tail: the last batch of m2-lz4-0 loses its last 10 bytes
    seg = root / "m2-lz4-0" / "00000000000000000024.log"
    data = seg.read_bytes()
    last = walk(data).batches[-1]
    os.truncate(seg, len(data) - 10)
    facts["torn"] = (seg, last, data[last.position : len(data) - 10])

    # a flipped byte in a middle batch of the first of m2-none-0's two segments
    seg = root / "m2-none-0" / f"{SEG0}.log"
    data = bytearray(seg.read_bytes())
    batches = walk(bytes(data)).batches
    victim = batches[len(batches) // 2]
    data[victim.position + 70] ^= 0xFF
    seg.write_bytes(data)
    later = root / "m2-none-0" / "00000000000000000024.log"
    facts["flipped"] = (seg, victim, bytes(data[victim.position :]), batches, later, later.read_bytes())

    (root / "m1-none-0" / f"{SEG0}.index").unlink()  # a missing index
    # a time index whose last timestamp is below its first: fails Kafka's sanity check
    garbage = struct.pack(">qi", 1_800_000_000_000, 3) + struct.pack(">qi", 1_000, 5)
    (root / "m2-snappy-0" / f"{SEG0}.timeindex").write_bytes(garbage)
    # a producer snapshot past the log end (11)
    txn = root / "transactions-0"
    shutil.copy(txn / "00000000000000000011.snapshot", txn / "00000000000000000099.snapshot")
    # a leader-epoch entry past the log end (48)
    epochs = root / "m2-zstd-0" / "leader-epoch-checkpoint"
    lines = epochs.read_text().splitlines()
    facts["epochs"] = epochs.read_text()
    epochs.write_text("\n".join([lines[0], str(int(lines[1]) + 1), *lines[2:], "9 1000"]) + "\n")
    # an interrupted compaction: a .cleaned, and a .swap above it (a split's)
    (root / "m0-none-0" / "00000000000000000048.log.cleaned").write_bytes(b"c" * 64)
    (root / "m0-none-0" / "00000000000000000050.log.swap").write_bytes(b"s" * 32)
    # a compaction that finished writing its .swap: the swap replaces segment 0 of m1-gzip-0
    gz = root / "m1-gzip-0"
    shutil.copy(gz / f"{SEG0}.log", gz / f"{SEG0}.log.swap")
    # a delete that did not finish
    (root / "m0-gzip-0" / f"{SEG0}.log.deleted").write_bytes(b"d" * 16)
    return root, facts


def test_dry_run_names_each_planted_problem_and_changes_nothing(planted, tmp_path: Path) -> None:
    root, facts = planted
    before = hashes(root)
    result = recover_cli_process(str(root), "--output", "json")
    assert result.returncode == 3, result.stderr
    assert hashes(root) == before
    assert not list(tmp_path.glob("*quarantine*"))
    changes = [orjson.loads(line) for line in result.stdout.splitlines()]
    summary = changes.pop()
    by = {(c["kind"], Path(c["file"]).relative_to(root).as_posix()): c for c in changes}

    seg, last, torn = facts["torn"]
    cut = by[("truncate_segment", "m2-lz4-0/00000000000000000024.log")]
    assert (cut["start"], cut["end"]) == (last.position, last.position + len(torn))
    assert (cut["firstOffset"], cut["lastOffset"]) == (last.base_offset, last.last_offset)
    assert cut["quarantine"] == f"m2-lz4-0/{last.base_offset:020d}.log"

    seg, victim, _, batches, later, later_bytes = facts["flipped"]
    cut = by[("truncate_segment", f"m2-none-0/{SEG0}.log")]
    after = [b for b in batches if b.position >= victim.position]
    assert (cut["start"], cut["end"]) == (victim.position, seg.stat().st_size)
    assert (cut["firstOffset"], cut["lastOffset"]) == (victim.base_offset, after[-1].last_offset)
    assert (cut["batches"], cut["records"]) == (len(after), sum(b.records_count for b in after))
    dropped = by[("drop_segment", "m2-none-0/00000000000000000024.log")]
    assert (dropped["start"], dropped["end"], dropped["firstOffset"]) == (0, len(later_bytes), 24)

    assert "index is missing" in by[("rebuild_indexes", f"m1-none-0/{SEG0}.log")]["message"]
    assert "sanity check" in by[("rebuild_indexes", f"m2-snappy-0/{SEG0}.log")]["message"]
    assert "offset 99" in by[("delete_snapshot", "transactions-0/00000000000000000099.snapshot")]["message"]
    assert (
        "epoch 9 from offset 1000"
        in by[("rewrite_leader_epoch_checkpoint", "m2-zstd-0/leader-epoch-checkpoint")]["message"]
    )
    assert ".cleaned" in by[("delete_leftover", "m0-none-0/00000000000000000048.log.cleaned")]["message"]
    assert "split" in by[("delete_leftover", "m0-none-0/00000000000000000050.log.swap")]["message"]
    assert by[("complete_swap", f"m1-gzip-0/{SEG0}.log.swap")]
    assert {k for k in by if k[1].startswith("m1-gzip-0/") and k[0] == "delete_leftover"} == {
        ("delete_leftover", f"m1-gzip-0/{SEG0}.{s}") for s in ("log", "index", "timeindex")
    }
    assert ("delete_leftover", f"m0-gzip-0/{SEG0}.log.deleted") in by
    for what in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        lowered = {(c["partition"], c["lastOffset"]) for c in changes if c["file"].endswith(what)}
        assert lowered == {("m2-lz4-0", last.base_offset), ("m2-none-0", victim.base_offset)}
    assert summary["partitionsChanged"] == 9
    marker = by[("write_clean_shutdown", ".kafka_cleanshutdown")]  # the fixture has none: written, last
    assert changes[-1] == marker and "skips its own recovery" in marker["message"]
    assert {c["partition"] for c in changes[:-1]} == {
        "m2-lz4-0", "m2-none-0", "m1-none-0", "m2-snappy-0", "transactions-0", "m2-zstd-0", "m0-none-0",
        "m1-gzip-0", "m0-gzip-0",
    }  # fmt: skip


def test_execute_repairs_and_quarantines_exactly_the_removed_bytes(planted, tmp_path: Path) -> None:
    root, facts = planted
    quarantine = tmp_path / "q"
    result = recover_cli(str(root), "--execute", "--quarantine", str(quarantine))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("kcli verify: clean.")
    assert errors(root) == []
    assert load_reports(root) == []
    assert recover_cli(str(root)).returncode == 0  # nothing left to do

    seg, last, torn = facts["torn"]
    assert (quarantine / "m2-lz4-0" / f"{last.base_offset:020d}.log").read_bytes() == torn
    assert seg.stat().st_size == last.position
    seg, victim, cut, _, later, later_bytes = facts["flipped"]
    assert (quarantine / "m2-none-0" / f"{victim.base_offset:020d}.log").read_bytes() == cut
    assert (quarantine / "m2-none-0" / later.name).read_bytes() == later_bytes
    assert not later.exists()
    assert (root / "m2-zstd-0" / "leader-epoch-checkpoint").read_text() == facts["epochs"]
    moved = {p.relative_to(quarantine).as_posix() for p in quarantine.rglob("*") if p.is_file()}
    assert {
        "m0-none-0/leftovers/00000000000000000048.log.cleaned",
        "m0-none-0/leftovers/00000000000000000050.log.swap",
        f"m0-gzip-0/leftovers/{SEG0}.log.deleted",
        "transactions-0/leftovers/00000000000000000099.snapshot",
        f"m1-gzip-0/leftovers/{SEG0}.log",
    } <= moved
    assert (root / "m1-gzip-0" / f"{SEG0}.log").exists() and not (
        root / "m1-gzip-0" / f"{SEG0}.log.swap"
    ).exists()

    journal = [orjson.loads(line) for line in (quarantine / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["action"] == "start" and journal[-1]["action"] == "done"
    actions = [(j["action"], j.get("start"), j.get("end")) for j in journal]
    assert ("truncate_segment", victim.position, victim.position + len(cut)) in actions
    assert all("time" in j for j in journal)


def test_a_clean_dir_needs_nothing_and_refuses_a_quarantine_inside_it(tmp_path: Path) -> None:
    """The fixture has no clean-shutdown marker, as after a crash: the marker is all it needs (its
    partitions hold no producer state a snapshot would keep); with the marker, nothing."""
    root = tmp_path / "logdir"
    shutil.copytree(FIXTURE, root)
    plan = plan_log_dir(root, verify_findings=verify_findings)
    assert [(c.kind, Path(c.file).name) for c in plan.changes()] == [
        ("write_clean_shutdown", ".kafka_cleanshutdown")
    ]
    done = recover_cli(str(root), "--execute", "--quarantine", str(tmp_path / "q0"))
    assert done.returncode == 0 and "1 changes made" in done.stdout, done.stdout + done.stderr
    assert (root / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":-1}'
    plan = plan_log_dir(root, verify_findings=verify_findings)
    assert plan.empty
    metadata_only = tmp_path / "metadata"  # a metadata.log.dir of its own: Kafka never skips its recovery
    shutil.copytree(FIXTURE / "__cluster_metadata-0", metadata_only / "__cluster_metadata-0")
    assert plan_log_dir(metadata_only, verify_findings=verify_findings).empty
    result = recover_cli(str(root))
    assert result.returncode == 0 and "0 changes" in result.stdout
    (root / "m2-none-0" / f"{SEG0}.index").unlink()
    plan = plan_log_dir(root, verify_findings=verify_findings)
    with pytest.raises(Exception, match="outside the log dir"):
        Executor(plan, root / "q").run()
    assert not (root / "q").exists()


# --- a log dir a broker wrote ---------------------------------------------------------------------------


def test_broker_written_dir_torn_tail_and_corrupt_batch_replayed_back(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "b1")
    try:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0}
        )
        for i in range(12):
            producer.produce("orders", value=f"v{i}".encode(), key=f"k{i}".encode(), partition=0)
            producer.flush(10)  # one batch per record
    finally:
        stop_cleanly(broker)
    data_dir = broker.data_dir
    log_dir = next(p.parent for p in data_dir.rglob("orders-0"))
    copy = tmp_path / "copy"
    shutil.copytree(log_dir, copy)
    seg = next((copy / "orders-0").glob("*.log"))
    data = bytearray(seg.read_bytes())
    batches = walk(bytes(data)).batches
    assert len(batches) == 12
    victim = batches[8]
    data[victim.position + 65] ^= 0x01  # in the records of batch 8: its CRC fails
    data = data[: batches[-1].position + 62]  # and the last batch is torn after its header
    seg.write_bytes(data)
    removed = bytes(data[victim.position :])

    assert (copy / ".kafka_cleanshutdown").exists()  # the broker stopped cleanly
    before = hashes(copy)
    dry = recover_cli(str(copy), "--output", "json")
    assert dry.returncode == 3, dry.stderr
    assert hashes(copy) == before
    cut = next(orjson.loads(line) for line in dry.stdout.splitlines() if '"truncate_segment"' in line)
    assert (cut["start"], cut["end"]) == (victim.position, len(data))
    assert (cut["firstOffset"], cut["lastOffset"]) == (8, 11)
    assert cut["records"] == 3  # batches 8..10 whole; 11 torn
    assert [p["producerId"] for p in cut["producers"]] == [victim.producer_id]
    assert cut["producers"][0]["firstSequence"] == 8 and cut["producers"][0]["lastSequence"] == 11

    quarantine = tmp_path / "q"
    done = recover_cli(str(copy), "--execute", "--quarantine", str(quarantine))
    assert done.returncode == 0, done.stdout + done.stderr
    assert errors(copy) == []
    assert load_reports(copy) == []
    held = quarantine / "orders-0" / "00000000000000000008.log"
    assert held.read_bytes() == removed
    # the marker is rewritten last, over the snapshots rebuilt at the cut, with a broker epoch that
    # matches no registration (the shutdown was not clean for the controller)
    assert (copy / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":-1}'
    assert (quarantine / "leftovers" / ".kafka_cleanshutdown").exists()

    # the recovered copy starts without recovery work, and takes the quarantined records back
    broker = start_broker(tmp_path / "b2", data_dir=copy)
    try:
        log = broker.log()
        assert "truncated" not in log and "rebuilt" not in log, log
        replay = subprocess.run(
            [*KCLI, "replay", str(quarantine / "orders-0"), "-b", broker.bootstrap, "-t", "back", "--skip-corrupt"],
            capture_output=True, text=True, env=kcli_env(), timeout=60,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stdout + replay.stderr
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
        )
        consumer.assign([TopicPartition("back", 0, 0)])  # no group join: quicker
        values = []
        for _ in range(50):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
            if len(values) >= 2:
                break
        consumer.close()
        # batch 8 fails its CRC (skipped), batch 11 is torn: 9 and 10 come back
        assert values == [b"v9", b"v10"]
    finally:
        stop_cleanly(broker)


def test_producer_snapshot_and_txnindex_rebuilt_as_the_broker_wrote_them(tmp_path: Path) -> None:
    """A broker's own snapshot at the log end and .txnindex, made unreadable, come back byte for byte."""
    broker = start_broker(tmp_path / "b1")
    try:
        plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
        txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t", "linger.ms": 0})
        txn.init_transactions(30)
        for end in ("commit", "abort", "commit", "open"):
            txn.begin_transaction()
            for i in range(3):
                txn.produce("ledger", value=f"{end}-{i}".encode(), partition=0)
                plain.produce("ledger", value=f"plain-{end}-{i}".encode(), partition=0)
                txn.flush(10)
                plain.flush(10)
            if end != "open":
                getattr(txn, f"{end}_transaction")(30)
    finally:
        stop_cleanly(broker)
    copy = tmp_path / "copy"
    shutil.copytree(next(p.parent for p in broker.data_dir.rglob("ledger-0")), copy)
    part = copy / "ledger-0"
    [snap] = sorted(part.glob("*.snapshot"))[-1:]
    [txn_index] = part.glob("*.txnindex")
    originals = {snap: snap.read_bytes(), txn_index: txn_index.read_bytes()}
    assert len(originals[txn_index]) == 34  # the one aborted transaction
    damaged = bytearray(originals[snap])
    damaged[-1] ^= 0x01  # the CRC fails
    snap.write_bytes(damaged)
    txn_index.write_bytes(originals[txn_index][:-5])  # not a whole entry

    dry = recover_cli(str(copy), "--output", "json")
    assert dry.returncode == 3, dry.stderr
    kinds = {(c["kind"], Path(c["file"]).name) for c in map(orjson.loads, dry.stdout.splitlines()[:-1])}
    assert kinds == {
        ("delete_snapshot", snap.name),
        ("write_snapshot", snap.name),
        ("rebuild_txn_index", txn_index.name),
        ("write_clean_shutdown", ".kafka_cleanshutdown"),
    }, dry.stdout
    quarantine = tmp_path / "q"
    done = recover_cli(str(copy), "--execute", "--quarantine", str(quarantine))
    assert done.returncode == 0, done.stdout + done.stderr
    assert txn_index.read_bytes() == originals[txn_index]
    # Entry for entry (the broker writes producers in the order it met them, kcli by id, Kafka in its
    # hash map's order: a snapshot's order means nothing).
    by_id = lambda data: sorted(read_snapshot(data), key=lambda e: e.producer_id)  # noqa: E731
    assert by_id(snap.read_bytes()) == by_id(originals[snap])
    assert [e.current_txn_first_offset >= 0 for e in by_id(originals[snap])].count(True) == 1  # "open"
    assert (quarantine / "ledger-0" / "leftovers" / snap.name).read_bytes() == damaged
    assert errors(copy) == [] and load_reports(copy) == []


def test_producer_state_is_rebuilt_from_the_checkpointed_log_start_as_the_broker_does(tmp_path: Path) -> None:
    """Batches below the log start (DeleteRecords moved it) are not replayed, by the loader's schedule:
    the snapshot recover writes holds the producers the broker's own loader rebuilds, and no others."""
    import time

    from formats.checkpoints import write_offset_checkpoint
    from formats.records import RecordSpec, build_batch

    root = tmp_path / "logs"
    part = root / "t-0"
    part.mkdir(parents=True)
    now = int(time.time() * 1000)
    batches = [
        build_batch([RecordSpec(now, None, b"v")], base_offset=offset, producer_id=pid, producer_epoch=0,
                    base_sequence=sequence)
        for offset, pid, sequence in ((0, 1, 0), (1, 1, 1), (2, 2, 0), (3, 2, 1), (4, 2, 2))
    ]  # fmt: skip
    (part / f"{SEG0}.log").write_bytes(b"".join(batches[:4]) + batches[4][:30])  # the last one torn
    (root / "log-start-offset-checkpoint").write_text(write_offset_checkpoint({("t", 0): 2}))
    shutil.copytree(root, tmp_path / "copy")

    done = recover_cli(str(root), "--execute", "--quarantine", str(tmp_path / "q"))
    assert done.returncode == 0, done.stdout + done.stderr
    written = read_snapshot((part / f"{'4'.zfill(20)}.snapshot").read_bytes())
    assert [(e.producer_id, e.last_sequence) for e in written] == [(2, 1)]

    copy = tmp_path / "copy" / "t-0"
    Log.load(copy, LogConfig(), log_start_offset_checkpoint=2, report=lambda line: None).close()
    loaded = read_snapshot((copy / f"{'4'.zfill(20)}.snapshot").read_bytes())
    assert [(e.producer_id, e.last_sequence) for e in loaded] == [(2, 1)]
