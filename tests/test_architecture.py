"""The dependency rules of ARCHITECTURE.md, read from the code's imports with `ast`, so they stay true.

`formats` imports nothing of ours; `kcli.protocol` only `formats`; nothing outside the broker (the CLI
aside, which starts it) imports `kcli.broker`, and the broker never imports `ops`; nothing imports
`kcli.cli`; inside the broker each layer imports only the ones below it (server -> network -> apis ->
coordinators -> replication -> metadata -> raft -> log); the network layer reaches the handlers only
through the dispatch seam, and the handlers never name the node, the server or the network, not even
in an annotation; there is no import circle; and no module takes another's private name. Imports under `if TYPE_CHECKING:` are annotations only and are not counted.
"""

from __future__ import annotations

import ast
import functools
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("formats", "kcli", "ops")

BROKER_LAYERS = [
    ("kcli.broker.server", "kcli.broker.node", "kcli.broker.lifecycle"),
    ("kcli.broker.network", "kcli.broker.authenticator"),
    ("kcli.broker.apis",),
    ("kcli.broker.group", "kcli.broker.txn", "kcli.broker.coordinator_log", "kcli.broker.producer_ids"),
    ("kcli.broker.replication",),
    ("kcli.broker.metadata",),
    ("kcli.broker.raft",),
    ("kcli.broker.log",),
]
"""Top to bottom. `node` wires the layers together, so it stands with the server; `network` is Kafka's
SocketServer, below the broker's lifecycle and above the handlers it hands frames to."""

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


def _imports(path: Path, *, annotations: bool = False) -> list[tuple[str, str | None]]:
    """(module, name or None) for every import outside `if TYPE_CHECKING:` blocks (inside them too
    with `annotations`)."""
    tree = ast.parse(path.read_text())
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
    return found


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
    network = ("kcli.broker.network", "kcli.broker.authenticator")
    assert _violations(network, ("kcli.broker.apis",), allowed=DISPATCH_SEAM) == []


def test_the_network_layer_knows_no_node_and_no_storage_below_the_handlers() -> None:
    below = tuple(p for layer in BROKER_LAYERS[3:] for p in layer)  # coordinators down to the log
    network = ("kcli.broker.network", "kcli.broker.authenticator")
    assert _violations(network, ("kcli.broker.node", "kcli.broker.server", *below)) == []


def test_handlers_never_name_the_node_the_server_or_the_network() -> None:
    """Handlers get what they use (`apis.context.NodeServices`), not the node that wires everything."""
    named = _edges(annotations=True)
    reached = sorted(
        (name, target)
        for name, targets in named.items()
        if _within(name, "kcli.broker.apis")
        for target in targets
        if _within(target, "kcli.broker.node", "kcli.broker.server", "kcli.broker.network")
    )
    assert reached == []


def test_request_headers_are_the_protocol_packages() -> None:
    """Header parsing is wire format, below the broker: the client and tools may use it too."""
    assert "kcli.protocol.request_header" in edges()["kcli.broker.apis.dispatch"]
    assert "kcli.protocol.request_header" in edges()["kcli.broker.network"]


def test_no_import_circles() -> None:
    try:
        list(TopologicalSorter(edges()).static_order())
    except CycleError as e:
        pytest.fail(f"import circle: {' -> '.join(e.args[1])}")


def test_no_import_circles_in_replication_even_for_annotations() -> None:
    """ReplicaManager sits on top of its fetchers, Partition and purgatory; none of them names it back,
    not even in an annotation (the fetchers get the callables they use)."""
    replication = {
        name: {t for t in targets if _within(t, "kcli.broker.replication")}
        for name, targets in _edges(annotations=True).items()
        if _within(name, "kcli.broker.replication")
    }
    try:
        list(TopologicalSorter(replication).static_order())
    except CycleError as e:
        pytest.fail(f"import circle: {' -> '.join(e.args[1])}")
    assert "kcli.broker.replication.manager" not in replication["kcli.broker.replication.fetcher"]


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


def test_the_raft_client_stays_split_along_kafkas_lines() -> None:
    """KafkaRaftClient's parts (elections, Fetch replication, snapshots, voter changes ...) are modules of
    their own; one growing past ~1,000 lines is a sign a second concept has moved in."""
    sizes = {
        name: len(path.read_text().splitlines())
        for name, path in MODULES.items()
        if _within(name, "kcli.broker.raft")
    }
    assert {name: size for name, size in sizes.items() if size > 1000} == {}
