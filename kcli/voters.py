"""A dynamic quorum's voters (KIP-853): who they are, where they listen, how they are written down.

Kafka's VoterSet, VoterNode and ReplicaKey, and the DynamicVoter(s) text form that `kafka-storage
format --initial-controllers` takes (`id@host:port:directoryId,...`). A voter is a replica key, its
node id with the directory id of its metadata log dir (meta.properties), plus its endpoints by
listener name and the kraft.version range it supports. The voter set travels in VotersRecord control
records (formats.records.KRaftVoter); the Raft client keeps their history by offset.

Used by `kcli storage format` (the bootstrap snapshot), the Raft client and the quorum CLI alike, so
it lives here rather than in the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from formats.checkpoints import uuid_from_base64, uuid_to_base64
from formats.errors import CheckpointError
from formats.records import KRaftVoter
from kcli.errors import KcliError


class VoterError(KcliError):
    """A voter string or voter change that cannot be used; one sentence, exit code 2."""


@dataclass(frozen=True, slots=True)
class VoterNode:
    """Kafka's VoterSet.VoterNode: a replica key, its listeners {name: (host, port)}, its kraft.version range."""

    node_id: int
    directory_id: uuid.UUID | None
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    min_kraft_version: int = 0
    max_kraft_version: int = 1

    def address(self, listener_name: str) -> tuple[str, int] | None:
        return self.listeners.get(listener_name)

    @property
    def key_text(self) -> str:
        """ReplicaKey.toString's content: the id and the directory id as Kafka prints them."""
        directory = "<undefined>" if self.directory_id is None else uuid_to_base64(self.directory_id)
        return f"ReplicaKey(id={self.node_id}, directoryId={directory})"

    def to_record(self) -> KRaftVoter:
        directory = (self.directory_id or uuid.UUID(int=0)).bytes
        endpoints = tuple((name, host, port) for name, (host, port) in self.listeners.items())
        return KRaftVoter(self.node_id, directory, endpoints, self.min_kraft_version, self.max_kraft_version)

    @classmethod
    def from_record(cls, voter: KRaftVoter) -> VoterNode:
        directory = uuid.UUID(bytes=voter.directory_id)
        return cls(
            voter.voter_id,
            None if directory.int == 0 else directory,
            {name: (host, port) for name, host, port in voter.endpoints},
            voter.min_kraft_version,
            voter.max_kraft_version,
        )


@dataclass(frozen=True, slots=True)
class VoterSet:
    """Kafka's VoterSet: the voters by node id (one replica key per id)."""

    voters: Mapping[int, VoterNode]

    @classmethod
    def of(cls, nodes: Iterable[VoterNode]) -> VoterSet:
        return cls({node.node_id: node for node in sorted(nodes, key=lambda n: n.node_id)})

    @classmethod
    def static(cls, addresses: Mapping[int, tuple[str, int]], listener_name: str) -> VoterSet:
        """A static quorum's voters (controller.quorum.voters): no directory ids."""
        return cls.of(VoterNode(i, None, {listener_name: a}) for i, a in addresses.items())

    @classmethod
    def from_records(cls, voters: Iterable[KRaftVoter]) -> VoterSet:
        return cls.of(VoterNode.from_record(v) for v in voters)

    def to_records(self) -> tuple[KRaftVoter, ...]:
        return tuple(node.to_record() for node in self.voters.values())

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self.voters)

    def addresses(self, listener_name: str) -> dict[int, tuple[str, int]]:
        """{id: (host, port)} of every voter with an endpoint on `listener_name`."""
        found = {}
        for node_id, node in self.voters.items():
            address = node.address(listener_name)
            if address is None and len(node.listeners) == 1:  # one listener: whatever its name
                address = next(iter(node.listeners.values()))
            if address is not None:
                found[node_id] = address
        return found

    def is_voter(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """VoterSet.isVoter: the id is a voter, and the directory ids match when both are known."""
        node = self.voters.get(node_id)
        if node is None:
            return False
        return node.directory_id is None or directory_id is None or node.directory_id == directory_id

    def add_voter(self, node: VoterNode) -> VoterSet | None:
        """VoterSet.addVoter: None when the id is a voter already."""
        if node.node_id in self.voters:
            return None
        return VoterSet.of([*self.voters.values(), node])

    def remove_voter(self, node_id: int, directory_id: uuid.UUID | None) -> VoterSet | None:
        """VoterSet.removeVoter: None when that replica key is not a voter, or it is the last one."""
        node = self.voters.get(node_id)
        if node is None or node.directory_id != directory_id or len(self.voters) == 1:
            return None
        return VoterSet.of(v for i, v in self.voters.items() if i != node_id)

    def update_voter(self, node: VoterNode) -> VoterSet | None:
        """VoterSet.updateVoter: the same replica key with new listeners and range; None otherwise."""
        old = self.voters.get(node.node_id)
        if old is None or old.directory_id != node.directory_id:
            return None
        return VoterSet.of([*(v for i, v in self.voters.items() if i != node.node_id), node])

    def key_texts(self) -> str:
        return "[" + ", ".join(v.key_text for v in self.voters.values()) + "]"


# --- the --initial-controllers text ----------------------------------------------------------------------


def parse_dynamic_voter(text: str) -> VoterNode:
    """DynamicVoter.parse: `id@host:port:directoryId` (a host in [] may hold colons), with its sentences.
    The node's endpoint has no listener name yet: it is the empty name until `with_listener`."""
    text = text.strip()
    at = text.find("@")
    if at < 0:
        raise VoterError("No @ found in dynamic voter string.")
    if at == 0:
        raise VoterError("Invalid @ at beginning of dynamic voter string.")
    try:
        node_id = _java_int(text[:at])
    except ValueError:
        raise VoterError("Failed to parse node id in dynamic voter string.") from None
    if node_id < 0:
        raise VoterError(f"Invalid negative node id {node_id} in dynamic voter string.")
    rest = text[at + 1 :]
    if not rest:
        raise VoterError("No hostname found after node id.")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise VoterError("Hostname began with left bracket, but no right bracket was found.")
        host, rest = rest[1:end], rest[end + 1 :]
    else:
        colon = rest.find(":")
        if colon < 0:
            raise VoterError("No colon following hostname could be found.")
        host, rest = rest[:colon], rest[colon:]
    if not rest.startswith(":"):
        raise VoterError("Port section must start with a colon.")
    rest = rest[1:]
    colon = rest.find(":")
    if colon < 0:
        raise VoterError("No colon following port could be found.")
    try:
        port = _java_int(rest[:colon])
    except ValueError:
        raise VoterError("Failed to parse port in dynamic voter string.") from None
    if not 0 <= port <= 65535:
        raise VoterError(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = uuid_from_base64(rest[colon + 1 :])
    except CheckpointError:
        raise VoterError("Failed to parse directory ID in dynamic voter string.") from None
    return VoterNode(node_id, directory_id, {"": (host, port)})


def parse_dynamic_voters(text: str, listener_name: str) -> VoterSet:
    """DynamicVoters.parse then toVoterSet(listener): comma-separated voters, each id at most once, at
    least one; every endpoint on the controller listener `listener_name`."""
    nodes: dict[int, VoterNode] = {}
    for part in text.strip().split(","):
        if not part:
            continue
        node = parse_dynamic_voter(part)
        if node.node_id in nodes:
            raise VoterError(f"Node id {node.node_id} was specified more than once.")
        nodes[node.node_id] = VoterNode(node.node_id, node.directory_id, {listener_name: node.listeners[""]})
    if not nodes:
        raise VoterError("No voters given.")
    return VoterSet.of(nodes.values())


def _java_int(text: str) -> int:
    """Integer.parseInt: an optional sign and decimal digits, within an int32."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(text)
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(text)
    return value
