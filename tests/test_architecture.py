"""The dependency rules of ARCHITECTURE.md, read from the code's imports with `ast`, so they stay true.

`formats` imports nothing of ours; `kcli.protocol` only `formats`; nothing outside the broker (the CLI
aside, which starts it) imports `kcli.broker`, and the broker never imports `ops`; nothing imports
`kcli.cli`; inside the broker each layer imports only the ones below it (server -> network -> apis ->
coordinators -> replication -> metadata -> raft -> log); the network layer reaches the handlers only
through the dispatch seam, and the handlers never name the node, the server or the network, not even
in an annotation; there is no import circle, not even one an annotation closes; and no module takes
another's private name. Imports under `if TYPE_CHECKING:` are annotations only: the layering rules
do not count them, the circle rules do.
"""

from __future__ import annotations

import ast
import functools
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("formats", "kcli", "ops")

NETWORK = (
    "kcli.broker.network",
    "kcli.broker.connection",
    "kcli.broker.transport",
    "kcli.broker.authenticator",
)
"""Kafka's network layer: SocketServer, the connection (KafkaChannel), the TLS transport, the SASL
authenticator."""

BROKER_LAYERS = [
    ("kcli.broker.server", "kcli.broker.node", "kcli.broker.lifecycle"),
    NETWORK,
    ("kcli.broker.apis",),
    ("kcli.broker.group", "kcli.broker.txn", "kcli.broker.coordinator_log", "kcli.broker.producer_ids"),
    ("kcli.broker.replication",),
    ("kcli.broker.metadata",),
    ("kcli.broker.raft",),
    ("kcli.broker.log",),
]
"""Top to bottom. `node` wires the layers together, so it stands with the server; the network layer is
Kafka's SocketServer, below the broker's lifecycle and above the handlers it hands frames to."""

DISPATCH_SEAM = ("kcli.broker.apis.dispatch", "kcli.broker.apis.context")
"""What the network layer may import of the handlers' package: the dispatch and the types it speaks."""


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the tests of the file (each used to parse the tree again)."""
    return ast.parse(path.read_text())


@functools.cache
def _imports(path: Path, *, annotations: bool = False) -> tuple[tuple[str, str | None], ...]:
    """(module, name or None) for every import outside `if TYPE_CHECKING:` blocks (inside them too
    with `annotations`)."""
    tree = _tree(path)
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if not annotations and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(inner) for inner in ast.walk(node))
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, alias.name) for alias in node.names]
    return tuple(found)


def _edges(*, annotations: bool = False) -> dict[str, set[str]]:
    """Module -> our modules it imports (a `from package import module` counts as the module)."""
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = set()
        for module, imported in _imports(path, annotations=annotations):
            if module.split(".")[0] not in PACKAGES:
                continue
            submodule = f"{module}.{imported}"
            targets.add(submodule if submodule in MODULES else module)
        edges[name] = targets - {name}
    return edges


@functools.cache
def edges() -> dict[str, set[str]]:
    """_edges() once, when a test first asks: at import it parsed the whole tree on every xdist worker."""
    return _edges()


def _within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _violations(importer, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list:
    """Imports from modules `importer` accepts (a predicate, or package prefixes) into `forbidden`."""
    accepts = importer if callable(importer) else (lambda name: _within(name, *importer))
    return sorted(
        (name, target)
        for name, targets in edges().items()
        if accepts(name)
        for target in targets
        if _within(target, *forbidden) and not _within(target, *allowed)
    )


def test_formats_imports_nothing_of_ours() -> None:
    assert _violations(("formats",), ("kcli", "ops")) == []


def test_the_protocol_package_imports_only_formats() -> None:
    assert _violations(("kcli.protocol",), ("kcli", "ops"), allowed=("kcli.protocol",)) == []


def test_only_the_broker_and_the_cli_import_the_broker() -> None:
    assert _violations(lambda name: not _within(name, "kcli.broker", "kcli.cli"), ("kcli.broker",)) == []


def test_the_broker_never_imports_ops() -> None:
    assert _violations(("kcli.broker",), ("ops",)) == []


def test_nothing_imports_the_cli() -> None:
    outside = lambda name: not _within(name, "kcli.cli") and name != "kcli.__main__"  # noqa: E731
    assert _violations(outside, ("kcli.cli",)) == []


@pytest.mark.parametrize("level", range(len(BROKER_LAYERS)))
def test_each_broker_layer_imports_only_the_layers_below(level: int) -> None:
    above = tuple(p for layer in BROKER_LAYERS[:level] for p in layer)
    assert _violations(BROKER_LAYERS[level], above) == []


def test_the_network_layer_reaches_the_handlers_only_through_the_dispatch_seam() -> None:
    assert _violations(NETWORK, ("kcli.broker.apis",), allowed=DISPATCH_SEAM) == []


def test_the_network_layer_knows_no_node_and_no_storage_below_the_handlers() -> None:
    below = tuple(p for layer in BROKER_LAYERS[3:] for p in layer)  # coordinators down to the log
    assert _violations(NETWORK, ("kcli.broker.node", "kcli.broker.server", *below)) == []


def test_handlers_never_name_the_node_the_server_or_the_network() -> None:
    """Handlers get what they use (`apis.context.NodeServices`), not the node that wires everything."""
    named = _edges(annotations=True)
    reached = sorted(
        (name, target)
        for name, targets in named.items()
        if _within(name, "kcli.broker.apis")
        for target in targets
        if _within(target, "kcli.broker.node", "kcli.broker.server", *NETWORK)
    )
    assert reached == []


def test_request_headers_are_the_protocol_packages() -> None:
    """Header parsing is wire format, below the broker: the client and tools may use it too."""
    assert "kcli.protocol.request_header" in edges()["kcli.broker.apis.dispatch"]
    assert "kcli.protocol.request_header" in edges()["kcli.broker.connection"]


def test_no_import_circles() -> None:
    try:
        list(TopologicalSorter(edges()).static_order())
    except CycleError as e:
        pytest.fail(f"import circle: {' -> '.join(e.args[1])}")


def test_no_import_circles_even_for_annotations() -> None:
    """Across `formats`, `kcli` and `ops`, no module names, even in an annotation, a module that
    imports it: a part gets a narrow Protocol or the callables it uses (the Raft client's parts get
    `raft_part.RaftClientState`, the fetchers what ReplicaManager hands them), and a type two modules
    share lives in the lower one."""
    try:
        list(TopologicalSorter(_edges(annotations=True)).static_order())
    except CycleError as e:
        pytest.fail(f"import circle (annotations counted): {' -> '.join(e.args[1])}")


def test_the_replica_fetchers_never_name_the_replica_manager() -> None:
    """ReplicaManager sits on top of its fetchers; they get the callables they use."""
    assert (
        "kcli.broker.replication.manager" not in _edges(annotations=True)["kcli.broker.replication.fetcher"]
    )


def test_no_module_takes_another_modules_private_name() -> None:
    taken = sorted(
        (name, f"{module}.{imported}")
        for name, path in MODULES.items()
        for module, imported in _imports(path)
        if module.split(".")[0] in PACKAGES
        and imported
        and imported.startswith("_")
        and not imported.startswith("__")
        and not _is_module(module, imported)  # a private module (formats._native) is fine
        and module != name
    )
    assert taken == []


def _is_module(package: str, name: str) -> bool:
    """A Python module of ours, or a compiled one (formats._native, built from formats/_native.c)."""
    return f"{package}.{name}" in MODULES or (REPO.joinpath(*package.split("."), name + ".c")).is_file()


def test_the_rules_see_the_tree() -> None:
    """Guards the guard: the module map and the import reader find what is there."""
    assert {"formats.records", "kcli.protocol.messages", "kcli.broker.replication.partition"} <= set(MODULES)
    assert "kcli.broker.log.log" in edges()["kcli.broker.replication.partition"]
    assert "kcli.protocol.messages" in edges()["ops.groups"]


SPLIT_ALONG_KAFKAS_LINES = (
    "kcli.broker.raft",  # KafkaRaftClient's parts: elections, Fetch replication, snapshots, voter changes
    "kcli.broker.metadata",  # the control managers: topics, replication, PartitionChangeBuilder ...
    "kcli.broker.log.log_cleaner",  # LogCleaner: the cleaner thread and its hand-offs
    "kcli.broker.log.cleaner",  # Cleaner: one clean of one log
    "kcli.broker.log.cleaner_manager",  # LogCleanerManager: which log next, checkpoints
    "kcli.broker.log.offset_map",  # SkimpyOffsetMap
)
"""Packages and modules split as Kafka splits them (KafkaRaftClient, ReplicationControlManager,
LogCleaner / Cleaner / LogCleanerManager)."""


def test_modules_split_along_kafkas_lines_stay_split() -> None:
    """One of them growing past ~1,000 lines is a sign a second concept has moved in."""
    sizes = {
        name: len(path.read_text().splitlines())
        for name, path in MODULES.items()
        if _within(name, *SPLIT_ALONG_KAFKAS_LINES)
    }
    assert {"kcli.broker.raft.raft_client", "kcli.broker.log.cleaner"} <= set(sizes)
    assert {name: size for name, size in sizes.items() if size > 1000} == {}


MODULE_LINES = 1000
"""Past ~1,000 lines a module usually holds a second concept: split it along Kafka's lines."""

OVER_MODULE_LINES = {
    "kcli.broker.log.log": "one concept, Kafka's UnifiedLog and LocalLog in one class: each step on the "
    "segment list (roll, truncation, segment deletion, the cleaned-segment swap, flush) also moves producer "
    "state, the epoch cache, the log start offset, the recovery point or the high watermark under one "
    "lock, and the append and read paths read the list directly: a LocalLog would be a rewrite, not a move",
    "kcli.config.broker_configs": "a table: Kafka's broker properties, one row each",
}
"""The modules that may stay over MODULE_LINES, and why."""


def test_no_module_is_over_1000_lines_unless_listed_with_its_reason() -> None:
    """Every module of `formats`, `kcli` and `ops`; a listed module that goes away leaves the list."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert sorted(set(OVER_MODULE_LINES) - set(sizes)) == []
    assert {
        name: size for name, size in sizes.items() if size > MODULE_LINES and name not in OVER_MODULE_LINES
    } == {}


def _raft_members(module: str, cls: str) -> set[str]:
    """What class `cls` of `module` declares: its annotated fields, methods and properties, and the
    attributes its `__init__` sets."""
    tree = _tree(MODULES[module])
    [body] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls]
    names = set()
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
            if node.name == "__init__":
                for inner in ast.walk(node):
                    targets = (
                        [inner.target] if isinstance(inner, ast.AnnAssign) else getattr(inner, "targets", [])
                    )
                    for target in targets:
                        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
                            names.add(target.attr)
    return names


def test_the_raft_parts_see_the_client_only_through_raft_client_state() -> None:
    """Every `self.raft.<name>` a part of the Raft client reads is declared by `RaftClientState`, and
    KafkaRaftClient has every name the Protocol declares, so the Protocol is the parts' whole view."""
    declared = _raft_members("kcli.broker.raft.raft_part", "RaftClientState")
    parts = [name for name, targets in edges().items() if "kcli.broker.raft.raft_part" in targets]
    assert {"kcli.broker.raft.elections", "kcli.broker.raft.voter_changes"} <= set(parts)
    read = {
        (name, node.attr)
        for name in parts
        for node in ast.walk(_tree(MODULES[name]))
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self.raft"
    }
    assert sorted((name, attr) for name, attr in read if attr not in declared) == []
    client = _raft_members("kcli.broker.raft.raft_client", "KafkaRaftClient")
    assert sorted(declared - client) == []


def test_a_connection_sees_its_server_only_through_socket_server_state() -> None:
    """The SocketServer imports its connections' module, so a connection names the server only as the
    `SocketServerState` Protocol: every `server.<name>` it reads is declared there, and SocketServer has
    every name the Protocol declares."""
    declared = _raft_members("kcli.broker.connection", "SocketServerState")
    read = {
        node.attr
        for node in ast.walk(_tree(MODULES["kcli.broker.connection"]))
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("server", "self.server")
    }
    assert {"handle", "accept", "wait_for_memory"} <= read
    assert sorted(read - declared) == []
    assert sorted(declared - _raft_members("kcli.broker.network", "SocketServer")) == []
