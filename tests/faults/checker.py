"""The checks of a run: pure functions over a `History`, each returning its violations as sentences.

Modelled on Redpanda's chaos write checker and Kafka's ducktape `validate_delivery`:
- every acknowledged write is in the final read, once, at the offset it was acknowledged with;
- no value appears twice (idempotence), each offset holds one record, offsets increase with no gap
  (the data topic holds no control batches);
- a write that failed or timed out appears at most once, and only above the offsets known when it
  started (it cannot have landed below a high watermark that already existed); an acknowledged one too;
- nothing appears that was never sent;
- read_committed shows exactly the committed transactions, none of the aborted, all or none of each
  unknown one; a read_committed consumer never saw an aborted record;
- what each consumer saw during the run agrees with the final read, in increasing offsets.
"""

from __future__ import annotations

from collections import defaultdict

from faults.history import History, Outcome, Transaction, TxnOutcome


def check(history: History) -> list[str]:
    """Every check; an empty list means the run kept Kafka's promises."""
    return [
        *check_offsets(history.final, contiguous=True, what=history.topic),
        *check_final_end(history),
        *check_writes(history),
        *check_offsets(
            history.final_committed, contiguous=False, what=f"{history.txn_topic} (read_committed)"
        ),
        *check_transactions(history.transactions, history.final_committed),
        *check_consumers(history),
    ]


def check_offsets(read: dict[int, list[tuple[int, str]]], *, contiguous: bool, what: str) -> list[str]:
    """Offsets strictly increase in each partition (so each offset holds one record); with `contiguous`,
    from 0 with no gap."""
    violations = []
    for partition, records in sorted(read.items()):
        previous = -1
        for offset, value in records:
            if offset <= previous:
                violations.append(
                    f"{what}-{partition}: offset {offset} ({value!r}) comes after offset {previous}"
                )
            elif contiguous and offset != previous + 1:
                violations.append(f"{what}-{partition}: offsets {previous + 1}..{offset - 1} are missing")
            previous = max(previous, offset)
    return violations


def check_final_end(history: History) -> list[str]:
    """The final read reached the high watermark of each partition (else the read, not the log, is short)."""
    violations = []
    for partition, end in sorted(history.final_end.items()):
        records = history.final.get(partition, [])
        last = records[-1][0] if records else -1
        if last + 1 < end:
            violations.append(
                f"{history.topic}-{partition}: the final read stopped at offset {last}, the high watermark is {end}"
            )
    return violations


def check_writes(history: History) -> list[str]:
    """Acknowledged writes kept at their offsets; every value at most once, sent, above what was known."""
    violations = []
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in history.final.items():
        for offset, value in records:
            where[value].append((partition, offset))
    sent = {w.value: w for w in history.writes}
    for value, places in sorted(where.items()):
        if value not in sent:
            violations.append(f"{value!r} at {places} was never sent")
        if len(places) > 1:
            violations.append(f"{value!r} appears {len(places)} times: at {places} (a duplicate)")
    for write in history.writes:
        places = where.get(write.value, [])
        if write.outcome is Outcome.ACKED:
            if not places:
                violations.append(
                    f"{write.value!r} was acknowledged at {history.topic}-{write.partition} offset "
                    f"{write.offset} and is lost"
                )
            elif (
                write.offset is None
            ):  # acknowledged without an offset: it must be there, above what was known
                for partition, offset in places:
                    if partition != write.partition or offset <= write.known_offset:
                        violations.append(
                            f"{write.value!r} was acknowledged (no offset) to partition {write.partition} "
                            f"above offset {write.known_offset}, but is at {places}"
                        )
            elif write.offset <= write.known_offset:
                violations.append(
                    f"{write.value!r} was acknowledged at offset {write.offset}, not above offset "
                    f"{write.known_offset} known when it started"
                )
            elif (write.partition, write.offset) not in places:
                violations.append(
                    f"{write.value!r} was acknowledged at {history.topic}-{write.partition} offset "
                    f"{write.offset} but is at {places}"
                )
            continue
        for partition, offset in places:
            if partition != write.partition:
                violations.append(
                    f"{write.value!r} was sent to partition {write.partition}, is in {partition}"
                )
            elif offset <= write.known_offset:
                violations.append(
                    f"{write.value!r} ({write.outcome.value}) is at offset {offset}, not above offset "
                    f"{write.known_offset} known when it started"
                )
    return violations


def check_transactions(
    transactions: list[Transaction], committed: dict[int, list[tuple[int, str]]]
) -> list[str]:
    """read_committed holds exactly the committed transactions' records (each once), none of the
    aborted ones, all or none of each unknown one, and nothing else."""
    violations = []
    visible: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in committed.items():
        for offset, value in records:
            visible[value].append((partition, offset))
    owner = {value: txn for txn in transactions for _, value in txn.records}
    for value, places in sorted(visible.items()):
        if value not in owner:
            violations.append(f"read_committed shows {value!r} at {places}, which no transaction sent")
        if len(places) > 1:
            violations.append(f"read_committed shows {value!r} {len(places)} times: at {places}")
    for txn in transactions:
        shown = [(p, v) for p, v in txn.records if v in visible]
        if txn.outcome is TxnOutcome.COMMITTED and len(shown) != len(txn.records):
            missing = [v for _, v in txn.records if v not in visible]
            violations.append(f"committed transaction {txn.txn_id} lost {missing} (read_committed)")
        elif txn.outcome is TxnOutcome.ABORTED and shown:
            violations.append(
                f"aborted transaction {txn.txn_id} shows {[v for _, v in shown]} (read_committed)"
            )
        elif txn.outcome is TxnOutcome.UNKNOWN and shown and len(shown) != len(txn.records):
            violations.append(
                f"transaction {txn.txn_id} (outcome unknown) is torn: read_committed shows "
                f"{[v for _, v in shown]} of {[v for _, v in txn.records]}"
            )
        for partition, value in shown:
            if visible[value][0][0] != partition:
                violations.append(
                    f"{value!r} was sent to partition {partition}, is in {visible[value][0][0]}"
                )
    return violations


def check_consumers(history: History) -> list[str]:
    """Each consumer's records agree with the final read (a record it saw was not lost or replaced)
    and come in increasing offsets per partition; a read_committed consumer saw no aborted record."""
    violations = []
    final = {(history.topic, p): dict(records) for p, records in history.final.items()}
    final.update({(history.txn_topic, p): dict(records) for p, records in history.final_committed.items()})
    aborted = {v for t in history.transactions if t.outcome is TxnOutcome.ABORTED for _, v in t.records}
    for name, seen in sorted(history.consumed.items()):
        last: dict[tuple[str, int], int] = {}
        committed_view = name in history.read_committed
        for record in seen:
            key = (record.topic, record.partition)
            if record.offset <= last.get(key, -1):
                violations.append(
                    f"consumer {name}: {record.topic}-{record.partition} offset {record.offset} came after "
                    f"offset {last[key]}"
                )
            last[key] = max(last.get(key, -1), record.offset)
            if committed_view and record.value in aborted:
                violations.append(f"consumer {name} saw {record.value!r} of an aborted transaction")
            if record.topic == history.txn_topic and not committed_view:
                continue  # read_uncommitted sees aborted records, which the final read_committed leaves out
            expected = final.get(key, {}).get(record.offset)
            if expected != record.value:
                violations.append(
                    f"consumer {name} saw {record.value!r} at {record.topic}-{record.partition} offset "
                    f"{record.offset}; the final read has {expected!r} there"
                )
    return violations
