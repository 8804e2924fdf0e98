"""Text checkpoints, partition.metadata, meta.properties and .kafka_cleanshutdown."""

import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from formats.checkpoints import (
    EpochEntry,
    MetaProperties,
    PartitionMetadata,
    _escape_property,
    parse_java_properties,
    read_clean_shutdown,
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    uuid_from_base64,
    uuid_to_base64,
    write_clean_shutdown,
    write_leader_epoch_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from formats.errors import CheckpointError

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
JAVA_WHITESPACE = " \t\n\x0b\f\r"
# Kafka's legal topic characters, and anything else a checkpoint line can carry (no Java whitespace).
kafka_topics = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=30
)
any_topics = st.text(
    st.characters(blacklist_characters=JAVA_WHITESPACE, blacklist_categories=("Cs",)), min_size=1, max_size=20
)
nonzero_uuids = st.integers(1, 2**128 - 1).map(lambda i: uuid.UUID(int=i))


def error_of(read, text: str) -> str:
    with pytest.raises(CheckpointError) as e:
        read(text)
    return str(e.value)


# --- offset checkpoints ------------------------------------------------------------------------------


def test_offset_checkpoint_golden_text():
    entries = {("orders", 1): 42, ("__consumer_offsets", 17): 0, ("orders", 0): 9001, ("a.b_c-d", 3): 5}
    text = write_offset_checkpoint(entries)
    assert text == "0\n4\n__consumer_offsets 17 0\na.b_c-d 3 5\norders 0 9001\norders 1 42\n"
    assert read_offset_checkpoint(text) == entries


def test_offset_checkpoint_reading_follows_java():
    assert read_offset_checkpoint("") == {}
    assert read_offset_checkpoint("0\n") == {}
    assert read_offset_checkpoint("0") == {}
    assert read_offset_checkpoint("0\n0\n") == {}
    # Runs of whitespace split fields, trailing whitespace is dropped, CRLF and CR end lines.
    assert read_offset_checkpoint("0\r\n2\r\nt \t 0  7  \rt 1 +8") == {("t", 0): 7, ("t", 1): 8}
    # Later lines win, and they still count.
    assert read_offset_checkpoint("0\n2\nt 0 1\nt 0 2\n") == {("t", 0): 2}


@given(st.dictionaries(st.tuples(st.one_of(kafka_topics, any_topics), int32s), int64s, max_size=20))
def test_offset_checkpoint_round_trip(entries):
    text = write_offset_checkpoint(entries)
    assert read_offset_checkpoint(text) == entries
    lines = text.split("\n")
    assert lines[:2] == ["0", str(len(entries))] and lines[-1] == ""


def test_checkpoint_errors_use_kafkas_sentences():
    assert error_of(read_offset_checkpoint, "1\n0\n") == (
        "Unrecognised version:1, expected version: 0 in checkpoint file"
    )
    assert error_of(read_offset_checkpoint, "0\n3\nt 0 1\nt 1 2\n") == (
        "Expected [3] entries in checkpoint file, but found only [2]"
    )
    assert error_of(read_offset_checkpoint, "0\n1\nt 0 1\nt 1 2\n") == (
        "Expected [1] entries in checkpoint file, but found only [2]"
    )
    assert error_of(read_offset_checkpoint, "0\n1\nt 0 1 9\n") == "Malformed line in checkpoint file: t 0 1 9"
    assert (
        error_of(read_offset_checkpoint, "0\n1\nt zero 1\n") == "Malformed line in checkpoint file: t zero 1"
    )
    assert error_of(read_offset_checkpoint, "0\n1\n t 0 1\n") == "Malformed line in checkpoint file:  t 0 1"
    assert error_of(read_offset_checkpoint, "0\n1\nt 0 1\n\n") == "Malformed line in checkpoint file: "
    assert error_of(read_offset_checkpoint, "0\n1\nt 2147483648 1\n").startswith("Malformed line")
    assert error_of(read_offset_checkpoint, "0\n1\nt 0 9223372036854775808\n").startswith("Malformed line")
    assert error_of(read_offset_checkpoint, " 0\n") == "Malformed line in checkpoint file:  0"
    assert error_of(read_offset_checkpoint, "0\nmany\n") == "Malformed line in checkpoint file: many"
    assert error_of(read_offset_checkpoint, "0\n1_0\n") == "Malformed line in checkpoint file: 1_0"
    assert error_of(read_leader_epoch_checkpoint, "0\n1\n5\n") == "Malformed line in checkpoint file: 5"


def test_offset_checkpoint_writer_rejects_unreadable_topics():
    for topic in ("", "has space", "tab\there", "line\nbreak"):
        with pytest.raises(ValueError):
            write_offset_checkpoint({(topic, 0): 1})
    with pytest.raises(ValueError):
        write_offset_checkpoint({("t", 2**31): 1})


@given(st.text(max_size=80))
def test_checkpoint_garbage_raises_only_checkpoint_error(text):
    for read in (read_offset_checkpoint, read_leader_epoch_checkpoint):
        try:
            read(text)
        except CheckpointError:
            pass


@given(st.text(alphabet="0123456789 \n\r\t-+tx", max_size=40))
def test_checkpoint_near_misses_raise_only_checkpoint_error(text):
    for read in (read_offset_checkpoint, read_leader_epoch_checkpoint):
        try:
            read(text)
        except CheckpointError:
            pass


# --- leader-epoch-checkpoint -------------------------------------------------------------------------

LEADER_EPOCH_EXAMPLE = "0\n3\n0 0\n2 5120\n5 9001\n"  # reference §3.6


def test_leader_epoch_checkpoint_example_from_the_reference():
    entries = [EpochEntry(0, 0), EpochEntry(2, 5120), EpochEntry(5, 9001)]
    assert read_leader_epoch_checkpoint(LEADER_EPOCH_EXAMPLE) == entries
    assert write_leader_epoch_checkpoint(entries) == LEADER_EPOCH_EXAMPLE
    assert write_leader_epoch_checkpoint([]) == "0\n0\n"
    assert read_leader_epoch_checkpoint("") == []


@given(st.lists(st.builds(EpochEntry, int32s, int64s), max_size=20))
def test_leader_epoch_checkpoint_round_trip(entries):
    assert read_leader_epoch_checkpoint(write_leader_epoch_checkpoint(entries)) == entries


# --- topic ids and partition.metadata ----------------------------------------------------------------


def test_uuid_base64_matches_kafkas_encoding():
    topic_id = uuid.UUID("517c94f6-2e40-467e-96d3-438ddad69e58")
    independent = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    assert uuid_to_base64(topic_id) == independent == "UXyU9i5ARn6W00ON2taeWA"  # from Kafka's UuidTest
    assert uuid_to_base64(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"  # Uuid.METADATA_TOPIC_ID
    assert uuid_from_base64("UXyU9i5ARn6W00ON2taeWA") == topic_id
    assert uuid_from_base64("UXyU9i5ARn6W00ON2taeWA==") == topic_id  # Java's decoder takes padding


@given(st.integers(0, 2**128 - 1))
def test_uuid_round_trip(value):
    u = uuid.UUID(int=value)
    text = uuid_to_base64(u)
    assert len(text) == 22
    assert uuid_from_base64(text) == u


def test_uuid_from_base64_errors():
    assert error_of(uuid_from_base64, "A" * 25) == (
        "Input string with prefix `AAAAAAAAAAAAAAAAAAAAAAAA` is too long to be decoded as a base64 UUID"
    )
    assert error_of(uuid_from_base64, "AAAAAA") == (
        "Input string `AAAAAA` decoded as 4 bytes, which is not equal to the expected 16 bytes of a "
        "base64-encoded UUID"
    )
    assert error_of(uuid_from_base64, "UXyU9i5ARn6W00ON2tae+A") == (
        "Input string `UXyU9i5ARn6W00ON2tae+A` is not valid URL-safe base64"
    )
    for bad in ("UXyU9i5ARn6W00ON2taeWA=", "AAAAA", "AA=A", "==", "UXyU9i5ARn6W00ON2ta/WA"):
        with pytest.raises(CheckpointError):
            uuid_from_base64(bad)


@given(st.text(max_size=30))
def test_uuid_garbage_raises_only_checkpoint_error(text):
    try:
        uuid_from_base64(text)
    except CheckpointError:
        pass


def test_partition_metadata_golden_text():
    topic_id = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    encoded = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    text = write_partition_metadata(PartitionMetadata(0, topic_id))
    assert text == f"version: 0\ntopic_id: {encoded}"
    assert text == "version: 0\ntopic_id: Dx4tPEtaaXiHlqW0w9Lh8A"
    assert read_partition_metadata(text) == PartitionMetadata(0, topic_id)
    assert read_partition_metadata(text + "\n") == PartitionMetadata(0, topic_id)
    # The key names are not checked and any version >= 0 is read, as Kafka does for downgrades.
    assert read_partition_metadata(f"v:\t3\r\nid:  {encoded}\nmore") == PartitionMetadata(3, topic_id)


@given(int32s.filter(lambda v: v >= 0), nonzero_uuids)
def test_partition_metadata_round_trip(version, topic_id):
    metadata = PartitionMetadata(version, topic_id)
    text = write_partition_metadata(metadata)
    assert text.count("\n") == 1 and not text.endswith("\n")
    assert read_partition_metadata(text) == metadata


def test_partition_metadata_errors():
    zero = uuid_to_base64(uuid.UUID(int=0))
    assert error_of(read_partition_metadata, f"version: 0\ntopic_id: {zero}") == (
        "Invalid topic ID in partition metadata file"
    )
    assert (
        error_of(read_partition_metadata, "version:0\ntopic_id: x")
        == "Malformed line in checkpoint file: version:0"
    )
    assert (
        error_of(read_partition_metadata, "version: zero\n")
        == "Malformed line in checkpoint file: version: zero"
    )
    assert error_of(read_partition_metadata, "version: 0\ntopic_id:x") == (
        "Malformed line in checkpoint file: topic_id:x"
    )
    assert error_of(read_partition_metadata, "version: -1\ntopic_id: x") == (
        "Unrecognized version of partition metadata file: -1"
    )
    assert error_of(read_partition_metadata, "") == "Partition metadata file is empty"
    assert error_of(read_partition_metadata, "version: 0\n") == "Partition metadata file has no topic_id line"
    assert error_of(read_partition_metadata, "version: 0\ntopic_id: AAAA").startswith("Input string `AAAA`")
    with pytest.raises(ValueError):
        write_partition_metadata(PartitionMetadata(0, uuid.UUID(int=0)))


@given(st.text(max_size=60))
def test_partition_metadata_garbage_raises_only_checkpoint_error(text):
    try:
        read_partition_metadata(text)
    except CheckpointError:
        pass


# --- meta.properties ---------------------------------------------------------------------------------

NOW = datetime(2024, 10, 29, 10, 15, 30, tzinfo=UTC)
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
DIRECTORY_ID = "UXyU9i5ARn6W00ON2taeWA"


def test_write_kraft_meta_properties_golden_text():
    meta = MetaProperties(version=1, node_id=1, cluster_id=CLUSTER_ID, directory_id=DIRECTORY_ID)
    assert write_meta_properties(meta, NOW) == (
        "#\n"
        "#Tue Oct 29 10:15:30 UTC 2024\n"
        f"cluster.id={CLUSTER_ID}\n"
        f"directory.id={DIRECTORY_ID}\n"
        "node.id=1\n"
        "version=1\n"
    )


def test_write_zookeeper_meta_properties_golden_text():
    meta = MetaProperties(version=0, node_id=3, broker_id=3)
    paris_summer = datetime(2024, 7, 4, 9, 5, 1, tzinfo=timezone(timedelta(hours=2)))
    assert write_meta_properties(meta, paris_summer) == (
        "#\n#Thu Jul 04 09:05:01 GMT+02:00 2024\nbroker.id=3\nversion=0\n"
    )
    with pytest.raises(ValueError):
        write_meta_properties(meta, datetime(2024, 7, 4))


def test_read_meta_properties_as_kafka_writes_them():
    # Keys unsorted, as a Java 17 broker may write them (Properties in hash order).
    text = (
        "#\n#Tue Oct 29 10:15:30 UTC 2024\n"
        f"node.id=1\ndirectory.id={DIRECTORY_ID}\nversion=1\ncluster.id={CLUSTER_ID}\n"
    )
    assert read_meta_properties(text) == MetaProperties(1, 1, CLUSTER_ID, DIRECTORY_ID, None)
    zk = "#\n#Mon Jan 01 00:00:00 UTC 2018\nversion=0\nbroker.id=0\ncluster.id=abc\n"
    assert read_meta_properties(zk) == MetaProperties(0, 0, "abc", None, 0)
    # Version 0 without broker.id is accepted by Kafka's builder; a missing version means 0.
    assert read_meta_properties("cluster.id=abc") == MetaProperties(0, None, "abc", None, None)


def test_directory_id_is_read_in_canonical_form():
    meta = read_meta_properties(f"version=1\nnode.id=2\ncluster.id=c\ndirectory.id={DIRECTORY_ID}==\n")
    assert meta.directory_id == DIRECTORY_ID


def test_meta_properties_errors_use_kafkas_sentences():
    read = read_meta_properties
    assert error_of(read, "version=x") == "Invalid meta.properties version string 'x'"
    assert error_of(read, "version=2") == "Unknown meta.properties version number 2"
    assert error_of(read, "version=1\ncluster.id=c") == "Failed to find node.id"
    assert error_of(read, "version=1\nnode.id=1") == "cluster.id was not found."
    assert (
        error_of(read, "version=1\nnode.id=one\ncluster.id=c")
        == "Unable to read node.id as a base-10 number."
    )
    assert error_of(read, "version=0\nbroker.id=") == "Unable to read broker.id as a base-10 number."
    assert error_of(read, "version=1\nnode.id=1\ncluster.id=c\ndirectory.id=nope") == (
        "Unable to read directory.id as a Uuid: Input string `nope` decoded as 3 bytes, which is not "
        "equal to the expected 16 bytes of a base64-encoded UUID"
    )


def test_meta_properties_whitespace_rules_follow_java():
    # The version is trimmed; node.id is not, and Java keeps a value's trailing whitespace.
    assert read_meta_properties("version = 1 \nnode.id:7\ncluster.id c").node_id == 7
    assert error_of(read_meta_properties, "version=1\nnode.id=7 \ncluster.id=c") == (
        "Unable to read node.id as a base-10 number."
    )


def test_meta_properties_writer_checks_the_version_rules():
    with pytest.raises(ValueError):
        write_meta_properties(MetaProperties(1, node_id=1), NOW)
    with pytest.raises(ValueError):
        write_meta_properties(MetaProperties(1, node_id=1, cluster_id="c", broker_id=1), NOW)
    with pytest.raises(ValueError):
        write_meta_properties(MetaProperties(0, node_id=1, broker_id=2), NOW)
    with pytest.raises(ValueError):
        write_meta_properties(MetaProperties(2, node_id=1, cluster_id="c"), NOW)
    assert "broker.id=4\n" in write_meta_properties(MetaProperties(0, node_id=4), NOW)


property_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@st.composite
def meta_properties(draw):
    directory_id = draw(st.none() | nonzero_uuids.map(uuid_to_base64))
    if draw(st.booleans()):
        node_id = draw(int32s)
        return MetaProperties(1, node_id, draw(property_text), directory_id, None)
    broker_id = draw(st.none() | int32s)
    return MetaProperties(0, broker_id, draw(st.none() | property_text), directory_id, broker_id)


@given(meta_properties())
def test_meta_properties_round_trip(meta):
    assert read_meta_properties(write_meta_properties(meta, NOW)) == meta


@given(st.dictionaries(property_text, property_text, max_size=8))
def test_java_properties_round_trip_through_the_store_escapes(props):
    # Keys and values escaped as Properties.store escapes them read back unchanged.
    text = write_meta_properties(MetaProperties(0), NOW)
    text += "".join(f"{_escape_property(k, is_key=True)}={_escape_property(v)}\n" for k, v in props.items())
    parsed = parse_java_properties(text)
    for key, value in props.items():
        assert parsed[key] == value


def test_java_properties_syntax():
    text = (
        "# comment\n"
        "  ! another comment \\\n"
        "plain=1\n"
        "colon : 2\n"
        "space   3\n"
        "   indented=4\n"
        "empty=\n"
        "bare\n"
        "continued = first \\\n"
        "     second\\\\\n"
        "escaped\\ key\\=x = a\\tb\\u0041\\n\n"
        "double==v\n"
        "keep.trailing=v  \n"
    )
    assert parse_java_properties(text) == {
        "plain": "1",
        "colon": "2",
        "space": "3",
        "indented": "4",
        "empty": "",
        "bare": "",
        "continued": "first second\\",
        "escaped key=x": "a\tbA\n",
        "double": "=v",
        "keep.trailing": "v  ",
    }
    assert parse_java_properties("a=1\\") == {"a": "1"}
    assert parse_java_properties("a=1\\\n\nb=2") == {"a": "1", "b": "2"}
    with pytest.raises(CheckpointError):
        parse_java_properties("a=\\u00zz")


@given(st.text(max_size=80))
def test_meta_properties_garbage_raises_only_checkpoint_error(text):
    try:
        read_meta_properties(text)
    except CheckpointError:
        pass


# --- .kafka_cleanshutdown ----------------------------------------------------------------------------


def test_clean_shutdown_file():
    assert write_clean_shutdown(12345) == '{"version":0,"brokerEpoch":12345}'
    assert read_clean_shutdown('{"version":0,"brokerEpoch":12345}') == 12345
    assert read_clean_shutdown(' {"brokerEpoch": -1, "other": [1]}\n') == -1
    # Empty (before 3.7) or unreadable content carries no epoch, as in Kafka.
    for text in ("", "garbage", "[1]", '{"version":0}', '{"brokerEpoch":"5"}', '{"brokerEpoch":true}'):
        assert read_clean_shutdown(text) is None
    assert read_clean_shutdown('{"brokerEpoch":9223372036854775808}') is None
    assert read_clean_shutdown("[" * 100_000) is None


@given(int64s)
def test_clean_shutdown_round_trip(epoch):
    assert read_clean_shutdown(write_clean_shutdown(epoch)) == epoch


@given(st.text(max_size=60))
def test_clean_shutdown_never_raises(text):
    result = read_clean_shutdown(text)
    assert result is None or isinstance(result, int)
