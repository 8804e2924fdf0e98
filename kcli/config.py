"""Broker configuration with Kafka's property names, types and defaults.

One table (`BROKER_CONFIGS`) maps each broker property to (type, default, validator, doc); a second
(`TOPIC_CONFIGS`) does the same for topic-level properties, and `TOPIC_CONFIG_SYNONYMS` says which
broker property supplies a topic property's default, as Kafka's `ServerTopicConfigSynonyms` does.
Values come from Kafka's defaults, then kcli's embedded defaults (`KCLI_DEFAULTS`, what a single
node needs), then a `server.properties` file, then `key=value` overrides. Any mistake raises
`ConfigError` with one sentence; Kafka properties that kcli accepts but does not act on are
listed with `used=False`, so a stock `server.properties` still loads.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from formats.checkpoints import parse_java_properties
from formats.errors import CheckpointError
from kcli.errors import KcliError
from kcli.security import ClientSecurity
from kcli.security.principal import SslPrincipalMapper

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(KcliError):
    """A bad configuration key, value or file; exit code 2."""


Validator = Callable[[object], str | None]
"""Returns None when the value is acceptable, otherwise the reason (a clause, no full stop)."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One property: its Kafka type, parsed default (None = no default), validator and doc."""

    name: str
    type: str  # "int" | "long" | "short" | "double" | "boolean" | "string" | "list" | "password" | "class"
    default: object
    validator: Validator | None
    doc: str
    used: bool = True  # False: accepted so Kafka's own files load, but kcli does not act on it


@dataclass(frozen=True, slots=True)
class Listener:
    """One entry of `listeners` / `advertised.listeners`: `NAME://host:port`."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker property that supplies a topic property's default, times `factor` (hours -> ms)."""

    name: str
    factor: int = 1


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------


class BrokerConfig:
    """Parsed, validated broker properties plus the values Kafka derives from them."""

    def __init__(self, settings: Mapping[str, str] | None = None, *, source: str = "configuration") -> None:
        self._explicit: dict[str, object] = {}
        self._dynamic: dict[str, object] = {}
        self._per_listener: dict[str, object] = {}
        """`listener.name.<listener>.[<mechanism>.]<key>` settings, by lower-cased full name."""
        self._raw_security: dict[str, str] = {}
        """`ssl.*` and `listener.name.<listener>.ssl.*` as written: TLS reads Kafka's strings."""
        for key, raw in (settings or {}).items():
            base = listener_prefixed_key(key)
            if base is not None:
                self._per_listener[key.lower()] = parse_value(BROKER_CONFIGS, base, raw, source=source)
            else:
                self._explicit[key] = parse_value(BROKER_CONFIGS, key, raw, source=source)
            if (base or key).startswith("ssl."):
                self._raw_security[key] = raw.strip()
        self._check_combinations()

    @classmethod
    def load(
        cls,
        *,
        config_file: str | Path | None = None,
        settings: Mapping[str, str] | None = None,
        overrides: Sequence[str] = (),
    ) -> BrokerConfig:
        """Layer a properties file, then `settings` (CLI flags), then `key=value` overrides."""
        merged: dict[str, str] = {}
        if config_file is not None:
            from_file = load_properties(config_file)
            _check_keys(from_file, f"in {config_file}")
            merged.update(from_file)
        merged.update(settings or {})
        for item in overrides:
            key, value = parse_override(item)
            _check_keys({key: value}, "in --override")
            merged[key] = value
        return cls(merged)

    def __getitem__(self, key: str) -> object:
        if key in self._dynamic:
            return self._dynamic[key]
        if key in self._explicit:
            return self._explicit[key]
        try:
            spec = BROKER_CONFIGS[key]
        except KeyError:
            raise ConfigError(_unknown_key_message(BROKER_CONFIGS, key, "configuration")) from None
        return KCLI_DEFAULTS.get(key, spec.default)

    def get(self, key: str) -> object:
        return self[key]

    def listener_value(self, listener_name: str, key: str, mechanism: str | None = None) -> object:
        """Kafka's listener-prefixed lookup: `listener.name.<listener>.<mechanism>.<key>` (mechanism
        lower-cased), then `listener.name.<listener>.<key>`, then `<key>`."""
        prefix = f"listener.name.{listener_name.lower()}."
        names = [f"{prefix}{mechanism.lower()}.{key}"] if mechanism else []
        for name in [*names, prefix + key]:
            if name in self._per_listener:
                return self._per_listener[name]
        return self[key]

    def listener_key(self, listener_name: str, key: str, mechanism: str | None = None) -> str:
        """The name of the key `listener_value` takes its value from (for sentences about it)."""
        prefix = f"listener.name.{listener_name.lower()}."
        names = [f"{prefix}{mechanism.lower()}.{key}"] if mechanism else []
        return next((name for name in [*names, prefix + key] if name in self._per_listener), key)

    def is_set(self, key: str) -> bool:
        """True when the value came from the file, a flag or an override rather than a default."""
        return key in self._explicit

    def explicit(self) -> dict[str, object]:
        """The static properties: the file, flags and overrides the node started with."""
        return dict(self._explicit)

    def set_dynamic(self, values: Mapping[str, object]) -> None:
        """Install the dynamic broker configs (KIP-226, parsed) over the static properties.

        As Kafka's KafkaConfig.updateCurrentConfig: whoever holds this object reads the new values from
        now on; `is_set` and `explicit` keep describing the static properties.
        """
        self._dynamic = dict(values)

    def ignored_keys(self) -> list[str]:
        """Keys that were set but that kcli does not act on (logged at start-up)."""
        plain = {k: k for k in self._explicit} | {k: listener_prefixed_key(k) for k in self._per_listener}
        return sorted(k for k, name in plain.items() if name is None or not BROKER_CONFIGS[name].used)

    # Derived values, computed the way Kafka's KafkaConfig computes them.

    @property
    def node_id(self) -> int:
        return int(self["node.id"])  # type: ignore[call-overload]

    @property
    def log_dirs(self) -> list[str]:
        """`log.dirs` when set, else `log.dir` (kcli's default: ./kcli-data)."""
        dirs = self["log.dirs"] if self.is_set("log.dirs") else None
        if dirs:
            return list(dirs)  # type: ignore[call-overload]
        return [str(self["log.dir"])]

    @property
    def metadata_log_dir(self) -> str:
        """`metadata.log.dir`, else the first log dir (Kafka's KafkaConfig.metadataLogDir)."""
        return str(self["metadata.log.dir"] or self.log_dirs[0])

    @property
    def process_roles(self) -> frozenset[str]:
        """The roles of this node, "broker" and/or "controller"; unset, kcli's default, is both."""
        return frozenset(self["process.roles"])  # type: ignore[call-overload]

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    @property
    def controller_listener(self) -> Listener | None:
        """The listener in `listeners` named by the first `controller.listener.names` entry.

        None on a broker-only node (its controller listener names the quorum's, which it does not
        bind) and when kcli's default single node has no controller listener.
        """
        names = self["controller.listener.names"]
        if not self.is_controller or not names:
            return None
        for listener in self["listeners"]:  # type: ignore[attr-defined]
            if listener.name == names[0]:  # type: ignore[index]
                return listener
        return None

    @property
    def quorum_voters(self) -> dict[int, tuple[str, int]]:
        """The static voters, {node id: (host, port)}, from `controller.quorum.voters`.

        Unset, with no bootstrap servers, is kcli's single-node default: this node is the only voter,
        at its own controller listener (an unset or wildcard host as 127.0.0.1), or, when it has no
        controller listener, the quorum of one is in-process and this is empty. With
        `controller.quorum.bootstrap.servers` (a dynamic quorum) the voters are not in the
        configuration and this is empty.
        """
        if self["controller.quorum.voters"]:
            return parse_quorum_voters(self["controller.quorum.voters"])  # type: ignore[arg-type]
        if self["controller.quorum.bootstrap.servers"]:
            return {}
        own = self.advertised_controller_listener
        return {} if own is None else {self.node_id: (own.host, own.port)}

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        """`controller.quorum.bootstrap.servers` as [(host, port)]; empty when unset."""
        return parse_quorum_bootstrap_servers(self["controller.quorum.bootstrap.servers"])  # type: ignore[arg-type]

    @property
    def is_single_node_quorum(self) -> bool:
        """True when this node is the whole controller quorum and no other node shares its cluster:
        kcli's default shape, or `controller.quorum.voters` naming only this (controller) node.
        Such a node formats its own log dirs on first start; any other needs `kcli storage format`.
        """
        if self["controller.quorum.bootstrap.servers"] or not self.is_controller:
            return False
        return set(self.quorum_voters) <= {self.node_id}

    @property
    def advertised_controller_listener(self) -> Listener | None:
        """The controller listener as voters reach it: its `advertised.listeners` entry if there is
        one (Kafka 3.9+), else the listener; an unset or wildcard host is 127.0.0.1."""
        own = self.controller_listener
        if own is None:
            return None
        chosen = own
        for listener in self["advertised.listeners"] or []:  # type: ignore[attr-defined]
            if listener.name == own.name:
                chosen = listener
                break
        host = chosen.host if chosen.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return Listener(chosen.name, host, chosen.port)

    @property
    def client_listeners(self) -> list[Listener]:
        """The listeners clients and other brokers use: those in `listeners` not named in
        `controller.listener.names`, in their order."""
        controller_names = set(self["controller.listener.names"])  # type: ignore[call-overload]
        found = [x for x in self["listeners"] if x.name not in controller_names]  # type: ignore[attr-defined]
        if not found:
            raise ConfigError("listeners names no listener for clients (all are controller listeners).")
        return found

    @property
    def listener(self) -> Listener:
        """The first client listener: what the ready line and `--listen` speak of."""
        return self.client_listeners[0]

    def advertised_listener(self, bound_port: int | None = None, name: str | None = None) -> Listener:
        """What Metadata tells clients of listener `name` (the first client listener by default):
        its `advertised.listeners` entry, else the listener itself.

        An unset host (bind to all interfaces) advertises 127.0.0.1 rather than a hostname that may
        not resolve; port 0 means "the port we were given by the OS".
        """
        own = self.listener if name is None else next(x for x in self.client_listeners if x.name == name)
        chosen = own
        if self.is_set("advertised.listeners"):
            for listener in self["advertised.listeners"]:  # type: ignore[attr-defined]
                if listener.name == own.name:
                    chosen = listener
                    break
        host = chosen.host or "127.0.0.1"
        port = chosen.port
        if port == 0 and bound_port is not None:
            port = bound_port
        return Listener(chosen.name, host, port)

    def protocol_of(self, name: str) -> str:
        """The security protocol of listener `name` (`listener.security.protocol.map`)."""
        return self._protocol_of(name) or "PLAINTEXT"

    @property
    def inter_broker_listener_name(self) -> str:
        """Kafka's interBrokerListenerName: `inter.broker.listener.name`, else the listener named
        after `security.inter.broker.protocol`; kcli falls back to the first client listener when
        no listener has that name (Kafka refuses such a configuration)."""
        name = self["inter.broker.listener.name"]
        if name:
            return str(name).upper()
        by_protocol = str(self["security.inter.broker.protocol"]).upper()
        names = [x.name for x in self.client_listeners]
        return by_protocol if by_protocol in names else names[0]

    def ssl_settings(self, listener_name: str) -> dict[str, str]:
        """The `ssl.*` settings of a listener as Kafka resolves them: `listener.name.<name>.ssl.*`
        wins over the plain `ssl.*` key (KafkaConfig.valuesWithPrefixOverride); the name in any case."""
        plain = {k: v for k, v in self._raw_security.items() if k.startswith("ssl.")}
        prefix = f"listener.name.{listener_name.lower()}."
        for key, value in self._raw_security.items():
            if key.lower().startswith(prefix):
                plain[key[len(prefix) :]] = value
        return plain

    def inter_broker_security(self) -> ClientSecurity:
        """How this broker reaches the others (replication, transaction markers): the inter-broker
        listener's protocol; for TLS its own `ssl.*` settings (its truststore checks the peers, its
        keystore is its client certificate); for SASL `sasl.mechanism.inter.broker.protocol` with the
        username and password of that mechanism's JAAS line, as Kafka's inter-broker client takes them."""
        from kcli.security.jaas import parse_jaas_config

        name = self.inter_broker_listener_name
        protocol = self.protocol_of(name)
        ssl = MappingProxyType(self.ssl_settings(name)) if protocol in ("SSL", "SASL_SSL") else None
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return ClientSecurity(protocol) if ssl is None else ClientSecurity(protocol, ssl=ssl)
        mechanism = str(self["sasl.mechanism.inter.broker.protocol"])
        jaas = self.listener_value(name, "sasl.jaas.config", mechanism)
        source = self.listener_key(name, "sasl.jaas.config", mechanism)
        options = parse_jaas_config(str(jaas), source=source).options if jaas is not None else {}
        extra = {} if ssl is None else {"ssl": ssl}
        return ClientSecurity(protocol=protocol, sasl_mechanism=mechanism, jaas=options, **extra)

    @property
    def log_roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return int(self["log.roll.ms"])  # type: ignore[call-overload]
        return int(self["log.roll.hours"]) * _HOUR_MS  # type: ignore[call-overload]

    @property
    def log_roll_jitter_ms(self) -> int:
        if self["log.roll.jitter.ms"] is not None:
            return int(self["log.roll.jitter.ms"])  # type: ignore[call-overload]
        return int(self["log.roll.jitter.hours"]) * _HOUR_MS  # type: ignore[call-overload]

    @property
    def log_retention_ms(self) -> int:
        """ms, else minutes, else hours; any negative value means unlimited (-1)."""
        if self["log.retention.ms"] is not None:
            millis = int(self["log.retention.ms"])  # type: ignore[call-overload]
        elif self["log.retention.minutes"] is not None:
            millis = int(self["log.retention.minutes"]) * _MINUTE_MS  # type: ignore[call-overload]
        else:
            millis = int(self["log.retention.hours"]) * _HOUR_MS  # type: ignore[call-overload]
        return -1 if millis < 0 else millis

    @property
    def log_flush_interval_ms(self) -> int:
        if self["log.flush.interval.ms"] is not None:
            return int(self["log.flush.interval.ms"])  # type: ignore[call-overload]
        return int(self["log.flush.scheduler.interval.ms"])  # type: ignore[call-overload]

    def topic_defaults(self) -> dict[str, object]:
        """Every topic property's value for a topic with no overrides, from its broker synonyms."""
        derived = {
            "segment.ms": self.log_roll_ms,
            "segment.jitter.ms": self.log_roll_jitter_ms,
            "retention.ms": self.log_retention_ms,
            "flush.ms": self.log_flush_interval_ms,
        }
        values: dict[str, object] = {}
        for name, spec in TOPIC_CONFIGS.items():
            if name in derived:
                values[name] = derived[name]
                continue
            synonyms = TOPIC_CONFIG_SYNONYMS.get(name, ())
            values[name] = self[synonyms[0].name] if synonyms else spec.default
        return values

    def topic_config(self, overrides: Mapping[str, str] | None = None) -> dict[str, object]:
        """A topic's effective configuration: broker-derived defaults with validated overrides on top."""
        values = self.topic_defaults()
        for key, raw in (overrides or {}).items():
            values[key] = parse_topic_value(key, raw)
        return values

    def _check_combinations(self) -> None:
        listeners = self["listeners"]
        if not listeners:
            raise ConfigError("listeners must name at least one listener.")
        self._check_quorum()
        if self.is_broker:
            own = self.client_listeners
            names = {x.name for x in own}
            advertised = [a for a in self["advertised.listeners"] or [] if a.name in names]  # type: ignore[attr-defined]
            for listener in [*own, *advertised]:
                self._check_protocol(listener)
            self._check_inter_broker(names)
        controller = self.controller_listener
        if controller is not None:
            self._check_protocol(controller, controller=True)
        listener_names = {x.name for x in self["listeners"]}  # type: ignore[attr-defined]
        for key in self._per_listener:
            name = key[len("listener.name.") :].partition(".")[0].upper()
            if name not in listener_names:
                raise ConfigError(f"{key} is set for listener {name}, which listeners does not name.")
        rules = self["ssl.principal.mapping.rules"]
        try:
            SslPrincipalMapper(str(rules))
        except KcliError as exc:
            raise ConfigError(str(exc)) from None
        broker_id = self["broker.id"]
        if self.is_set("broker.id") and broker_id != -1 and broker_id != self.node_id:
            raise ConfigError(f"broker.id {broker_id} must match node.id {self.node_id} when both are set.")
        if self.log_retention_ms == 0:
            raise ConfigError("log.retention.ms must be unlimited (-1) or, equal or greater than 1.")
        for listener in self.client_listeners if self.is_broker else []:
            host = self.advertised_listener(name=listener.name).host
            if host in ("0.0.0.0", "::"):
                raise ConfigError(
                    "advertised.listeners cannot use the nonroutable meta-address "
                    f"{host}; set advertised.listeners to a routable address."
                )
        if not self.log_dirs or any(not d for d in self.log_dirs):
            raise ConfigError("log.dirs must name at least one directory.")

    def _check_protocol(self, listener: Listener, *, controller: bool = False) -> None:
        protocol = self._protocol_of(listener.name)
        if protocol is None:
            raise ConfigError(
                f"listener name {listener.name} has no entry in listener.security.protocol.map."
            )
        if protocol not in SECURITY_PROTOCOL_IDS:
            raise ConfigError(
                f"listener {listener} uses security protocol {protocol}; it must be one of "
                f"{', '.join(SECURITY_PROTOCOL_IDS)}."
            )
        if controller and protocol != "PLAINTEXT":
            raise ConfigError(
                f"controller listener {listener} uses security protocol {protocol}; kcli's controller "
                "quorum speaks PLAINTEXT only."
            )
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            self._check_sasl(listener.name)

    def _check_sasl(self, listener_name: str) -> None:
        """A SASL listener's mechanisms and JAAS lines, refused in one sentence as Kafka refuses them."""
        from kcli.security.jaas import JaasError, check_mechanism, parse_jaas_config
        from kcli.security.sasl import GSSAPI_REFUSAL, MECHANISMS, SaslError
        from kcli.security.sasl.oauthbearer import UnsecuredValidator

        enabled: list[str] = self.listener_value(listener_name, "sasl.enabled.mechanisms")  # type: ignore[assignment]
        if not enabled:
            raise ConfigError(
                f"No SASL mechanisms are enabled on listener {listener_name} (sasl.enabled.mechanisms)."
            )
        for mechanism in enabled:
            if mechanism == "GSSAPI":
                raise ConfigError(f"sasl.enabled.mechanisms of listener {listener_name}: {GSSAPI_REFUSAL}")
            if mechanism not in MECHANISMS:
                raise ConfigError(
                    f"sasl.enabled.mechanisms of listener {listener_name} names {mechanism!r}; kcli offers "
                    f"{', '.join(MECHANISMS)}."
                )
            jaas = self.listener_value(listener_name, "sasl.jaas.config", mechanism)
            if jaas is not None:
                source = self.listener_key(listener_name, "sasl.jaas.config", mechanism)
                if source == "sasl.jaas.config":
                    source = f"sasl.jaas.config (listener {listener_name}, {mechanism})"
                try:
                    login = parse_jaas_config(str(jaas), source=source)
                    check_mechanism(login, mechanism, source=source)
                    options = login.options
                    if mechanism == "OAUTHBEARER":
                        UnsecuredValidator.from_jaas(options)
                except JaasError as exc:
                    raise ConfigError(str(exc)) from None
                except SaslError as exc:
                    raise ConfigError(f"listener {listener_name}, {mechanism}: {exc}") from None
            elif mechanism == "PLAIN":
                raise ConfigError(
                    f"listener {listener_name} enables PLAIN without users: set "
                    f"listener.name.{listener_name.lower()}.plain.sasl.jaas.config to a PlainLoginModule line "
                    'with user_<name>="<password>" entries.'
                )
        delay, idle = self["connection.failed.authentication.delay.ms"], self["connections.max.idle.ms"]
        if delay >= idle:  # type: ignore[operator]
            raise ConfigError(
                f"connection.failed.authentication.delay.ms={delay} should always be less than "
                f"connections.max.idle.ms={idle} to prevent failed authentication responses from timing out"
            )
        inter_broker = self["sasl.mechanism.inter.broker.protocol"]
        in_a_cluster = bool(self["controller.quorum.voters"] or self["controller.quorum.bootstrap.servers"])
        if (
            in_a_cluster or self.is_set("sasl.mechanism.inter.broker.protocol")
        ) and inter_broker not in enabled:
            raise ConfigError(
                "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL "
                "is used for inter-broker communication"
            )
        if (
            in_a_cluster
            and inter_broker != "OAUTHBEARER"
            and listener_name == self.inter_broker_listener_name
        ):
            # As Kafka: only the inter-broker listener's login (a SASL listener beside a PLAINTEXT
            # inter-broker one needs none); the JAAS line's username and password only; a SCRAM user's credentials are in the
            # metadata log (`kcli storage format --add-scram` bootstraps them), which no config check sees
            options = self.inter_broker_security().jaas
            if not options.get("username") or "password" not in options:
                raise ConfigError(
                    f"listener {listener_name}: inter-broker SASL/{inter_broker} needs username and password in "
                    f"listener.name.{listener_name.lower()}.{str(inter_broker).lower()}.sasl.jaas.config."
                )

    def _check_inter_broker(self, names: set[str]) -> None:
        """KafkaConfig's rules: not both inter-broker keys, and a listener that exists."""
        if self.is_set("inter.broker.listener.name") and self.is_set("security.inter.broker.protocol"):
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
            )
        if self.is_set("inter.broker.listener.name"):
            name = self.inter_broker_listener_name
            if self._protocol_of(name) is None:
                raise ConfigError(
                    f"Listener with name {name} defined in inter.broker.listener.name not found in "
                    "listener.security.protocol.map."
                )
            if name not in names:
                raise ConfigError(
                    f"inter.broker.listener.name must be a listener name defined in listeners; "
                    f"{name} is not one of {', '.join(sorted(names))}."
                )
        elif self.is_set("security.inter.broker.protocol"):
            protocol = str(self["security.inter.broker.protocol"]).upper()
            if protocol not in names:
                raise ConfigError(
                    f"security.inter.broker.protocol {protocol} needs a listener named {protocol} in listeners."
                )

    def _protocol_of(self, name: str) -> str | None:
        """Kafka's effectiveListenerSecurityProtocolMap: a controller listener missing from a default
        (not explicitly set) map is PLAINTEXT."""
        protocol = self["listener.security.protocol.map"].get(name)  # type: ignore[attr-defined]
        if protocol is None and not self.is_set("listener.security.protocol.map"):
            if name in self["controller.listener.names"]:  # type: ignore[operator]
                return "PLAINTEXT"
        return protocol

    def _check_quorum(self) -> None:
        """KafkaConfig.validateValues' KRaft rules, in its order and with its sentences.

        With neither controller.quorum.voters nor controller.quorum.bootstrap.servers, a combined node
        is kcli's single-node default (it is the whole quorum) and nothing more is asked of it.
        """
        roles = self.process_roles
        voters = parse_quorum_voters(self["controller.quorum.voters"])  # type: ignore[arg-type]
        bootstrap = self["controller.quorum.bootstrap.servers"]
        names: list[str] = self["controller.listener.names"]  # type: ignore[assignment]
        listener_names = [listener.name for listener in self["listeners"]]  # type: ignore[attr-defined]
        voter_set = "Set(" + ", ".join(str(v) for v in sorted(voters)) + ")"
        if voters and bootstrap:
            raise ConfigError(
                "controller.quorum.voters and controller.quorum.bootstrap.servers cannot both be set: "
                "use controller.quorum.voters for a static quorum, or controller.quorum.bootstrap.servers "
                "for a dynamic one."
            )
        if not voters and not bootstrap:
            if roles == _COMBINED:
                return
            raise ConfigError(
                "If using process.roles, either controller.quorum.bootstrap.servers must contain the set "
                "of bootstrap controllers or controller.quorum.voters must contain a parseable set of "
                "controllers."
            )
        if not self.is_set("node.id"):
            raise ConfigError(
                "Missing configuration `node.id` which is required when the controller quorum is "
                "configured (controller.quorum.voters or controller.quorum.bootstrap.servers)."
            )
        for host, _port in voters.values():
            if host == "0.0.0.0":
                raise ConfigError(f"Host string ({host}) is not routeable.")
        if roles == {"broker"}:
            if self.node_id in voters:
                raise ConfigError(
                    "If process.roles contains just the 'broker' role, the node id "
                    f"{self.node_id} must not be included in the set of voters controller.quorum.voters={voter_set}."
                )
            if not names:
                raise ConfigError(
                    "controller.listener.names must contain at least one value when running KRaft with "
                    "just the broker role."
                )
            if any(name in names for name in listener_names):
                raise ConfigError(
                    "controller.listener.names must not contain a value appearing in the 'listeners' "
                    "configuration when running KRaft with just the broker role."
                )
            for name in names:
                if self._protocol_of(name) is None:
                    raise ConfigError(
                        f"Controller listener with name {name} defined in controller.listener.names not "
                        "found in listener.security.protocol.map (an explicit security mapping for each "
                        "controller listener is required if listener.security.protocol.map is non-empty, "
                        "or if there are security protocols other than PLAINTEXT in use)."
                    )
            return
        if roles == {"controller"} and any(name not in names for name in listener_names):
            raise ConfigError(
                "The listeners config must only contain KRaft controller listeners from "
                "controller.listener.names when process.roles=controller."
            )
        if voters and self.node_id not in voters:
            raise ConfigError(
                "If process.roles contains the 'controller' role, the node id "
                f"{self.node_id} must be included in the set of voters controller.quorum.voters={voter_set}."
            )
        if not any(name in listener_names for name in names):
            raise ConfigError(
                "controller.listener.names must contain at least one value appearing in the 'listeners' "
                "configuration when running the KRaft controller role."
            )
        if not all(name in listener_names for name in names):
            raise ConfigError(
                "controller.listener.names must only contain values appearing in the 'listeners' "
                "configuration when running the KRaft controller role."
            )


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a `server.properties` file (Java properties syntax) into raw strings."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read config file {path}: it is not UTF-8 text.") from None
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ConfigError(f"cannot read config file {path}: {reason}.") from None
    return parse_properties(text, source=str(path))


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """Parse Java properties text (comments, `=`/`:`/space separators, continuations, escapes)."""
    try:
        return parse_java_properties(text)
    except CheckpointError as exc:
        raise ConfigError(f"cannot parse {source}: {str(exc).rstrip('.')}.") from None


def parse_override(item: str) -> tuple[str, str]:
    """`key=value` from the command line; the value may be empty or contain `=`."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} is not of the form key=value.")
    return key.strip(), value.strip()


def parse_value(
    table: Mapping[str, ConfigKey], key: str, raw: str, *, source: str = "configuration"
) -> object:
    """Parse one raw string for `key` per its type and validator; raise ConfigError otherwise."""
    spec = table.get(key)
    if spec is None:
        raise ConfigError(_unknown_key_message(table, key, source))
    try:
        value = _PARSERS[spec.type](raw.strip(), key)
    except ValueError as exc:
        raise ConfigError(f"invalid value {raw.strip()!r} for configuration {key}: {exc}.") from None
    if value is not None and spec.validator is not None:
        reason = spec.validator(value)
        if reason is not None:
            raise ConfigError(f"invalid value {raw.strip()!r} for configuration {key}: {reason}.")
    return value


def parse_topic_value(key: str, raw: str) -> object:
    """Validate one topic-level property (CreateTopics / AlterConfigs will answer INVALID_CONFIG)."""
    return parse_value(TOPIC_CONFIGS, key, raw, source="topic configuration")


def is_valid_topic_name(name: str) -> bool:
    """Kafka's `Topic.isValid`: 1-249 chars of [a-zA-Z0-9._-], and not "." or ".."."""
    return 0 < len(name) <= 249 and name not in (".", "..") and _TOPIC_NAME.fullmatch(name) is not None


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_COMBINED = frozenset({"broker", "controller"})
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


# ---------------------------------------------------------------------------------------------------
# Parsers and validators
# ---------------------------------------------------------------------------------------------------

_MINUTE_MS = 60 * 1000
_HOUR_MS = 60 * _MINUTE_MS
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def _parse_int(bits: int) -> Callable[[str, str], int | None]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def parse(text: str, key: str) -> int | None:
        if text == "" and _NULLABLE_NUMBERS.get(key, False):
            return None
        try:
            value = int(text, 10)
        except ValueError:
            raise ValueError("expected an integer") from None
        if not low <= value <= high:
            raise ValueError(f"out of range for a {bits}-bit integer")
        return value

    return parse


def _parse_double(text: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


def _parse_boolean(text: str, key: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("expected true or false")


def _parse_string(text: str, key: str) -> str | None:
    return text


def _parse_list(text: str, key: str) -> list[str]:
    if text == "":
        return []
    return [item.strip() for item in text.split(",")]


_PARSERS: dict[str, Callable[[str, str], object]] = {
    "short": _parse_int(16),
    "int": _parse_int(32),
    "long": _parse_int(64),
    "double": _parse_double,
    "boolean": _parse_boolean,
    "string": _parse_string,
    "password": _parse_string,
    "class": _parse_string,
    "list": _parse_list,
}

# Properties whose Kafka default is null: an empty value means "unset" rather than a parse error.
_NULLABLE_NUMBERS = {
    "log.roll.ms": True,
    "log.roll.jitter.ms": True,
    "log.retention.ms": True,
    "log.retention.minutes": True,
    "log.flush.interval.ms": True,
}


def at_least(minimum: float) -> Validator:
    def check(value: object) -> str | None:
        return None if value >= minimum else f"value must be at least {minimum}"  # type: ignore[operator]

    return check


def between(low: float, high: float) -> Validator:
    def check(value: object) -> str | None:
        if low <= value <= high:  # type: ignore[operator]
            return None
        return f"value must be between {low} and {high}"

    return check


def one_of(*choices: str, case_sensitive: bool = True) -> Validator:
    def check(value: object) -> str | None:
        candidate = value if case_sensitive else str(value).lower()
        allowed = choices if case_sensitive else tuple(c.lower() for c in choices)
        return None if candidate in allowed else f"value must be one of {', '.join(choices)}"

    return check


def list_of(*choices: str) -> Validator:
    def check(value: object) -> str | None:
        bad = [item for item in value if item not in choices]  # type: ignore[attr-defined]
        if not value:
            return f"value must name at least one of {', '.join(choices)}"
        return None if not bad else f"{bad[0]!r} is not one of {', '.join(choices)}"

    return check


def throttled_replica_list(name: str) -> Validator:
    """Kafka's ThrottledReplicaListValidator: `*`, or `partition:broker` items (empty ones allowed)."""

    def check(value: object) -> str | None:
        items = [str(item).strip() for item in value]  # type: ignore[attr-defined]
        if all(_THROTTLED_REPLICA.fullmatch(item) for item in items) or "".join(items) == "*":
            return None
        return (
            f"{name} must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )

    return check


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _compression_level(low: int, high: int, extra: int | None = None) -> Validator:
    def check(value: object) -> str | None:
        if low <= value <= high or value == extra:  # type: ignore[operator]
            return None
        tail = f" or equal to {extra}" if extra is not None else ""
        return f"value must be between {low} and {high}{tail}"

    return check


_LISTENER = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9a-fA-F:.]+\]|[^:\[\]/]*):(-?\d+)$")


def parse_listeners(text: str) -> list[Listener]:
    """`PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9093` -> listeners; names are upper-cased as Kafka does."""
    listeners: list[Listener] = []
    for item in _parse_list(text, "listeners"):
        match = _LISTENER.match(item)
        if match is None:
            raise ValueError(f"{item!r} is not of the form NAME://host:port")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} in {item!r} is not between 0 and 65535")
        if any(existing.name == name for existing in listeners):
            raise ValueError(f"listener name {name} appears more than once")
        listeners.append(Listener(name, host, port))
    return listeners


def _parse_listener_value(text: str, key: str) -> list[Listener] | None:
    if text == "" and key == "advertised.listeners":
        return None
    return parse_listeners(text)


def _parse_protocol_map(text: str, key: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in _parse_list(text, key):
        name, sep, protocol = item.partition(":")
        if not sep or not name or not protocol:
            raise ValueError(f"{item!r} is not of the form LISTENER_NAME:SECURITY_PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


_PARSERS["listeners"] = _parse_listener_value
_PARSERS["protocol_map"] = _parse_protocol_map


# Kafka's Utils.getHost/getPort: an optional `scheme://`, then host (IPv6 in brackets or not), `:`, digits.
_HOST_PORT = re.compile(r"(?:[0-9a-zA-Z\-%._]*://)?\[?([0-9a-zA-Z\-%._:]*)]?:([0-9]+)")
_VOTERS_FORM = "Each entry should be in the form `{id}@{host}:{port}`."
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def parse_quorum_voters(entries: Iterable[str]) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters` entries `{id}@{host}:{port}` -> {id: (host, port)}, as Kafka's
    QuorumConfig.parseVoterConnections reads them, with its sentences for a malformed entry; a repeated
    id, which Kafka lets the last address win, is refused."""
    voters: dict[int, tuple[str, int]] = {}
    for entry in entries:
        parts = entry.split("@")
        while len(parts) > 1 and parts[-1] == "":  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) != 2:
            raise ConfigError(f"Invalid configuration value for controller.quorum.voters. {_VOTERS_FORM}")
        id_text, address = parts
        if not _JAVA_INT.fullmatch(id_text) or not -(2**31) <= int(id_text) < 2**31:
            raise ConfigError(f"Failed to parse voter ID as an integer from {id_text}.")
        match = _HOST_PORT.fullmatch(address)
        if match is None or not match.group(1):
            raise ConfigError(
                f"Failed to parse host name from entry {entry} for the configuration "
                f"controller.quorum.voters. {_VOTERS_FORM}"
            )
        port = int(match.group(2))
        if port > 65535:
            raise ConfigError(
                f"Failed to parse host port from entry {entry} for the configuration "
                f"controller.quorum.voters. {_VOTERS_FORM}"
            )
        if int(id_text) in voters:  # Kafka keeps the last address silently; two voters of one id is a typo
            raise ConfigError(
                f"controller.quorum.voters names node {int(id_text)} twice; each voter needs its own node id."
            )
        voters[int(id_text)] = (match.group(1), port)
    return voters


def parse_quorum_bootstrap_servers(entries: Iterable[str]) -> list[tuple[str, int]]:
    """`controller.quorum.bootstrap.servers` entries `{host}:{port}` -> [(host, port)], with the
    sentences of Kafka's QuorumConfig.parseBootstrapServer."""
    servers: list[tuple[str, int]] = []
    for entry in entries:
        match = _HOST_PORT.fullmatch(entry)
        what = "name" if match is None or not match.group(1) else "port"
        if what == "name" or int(match.group(2)) > 65535:  # type: ignore[union-attr]
            raise ConfigError(
                f"Failed to parse host {what} from {entry} for the configuration "
                'controller.quorum.bootstrap.servers. Each entry should be in the form "{host}:{port}".'
            )
        servers.append((match.group(1), int(match.group(2))))  # type: ignore[union-attr]
    return servers


def _check_quorum_voters(value: object) -> str | None:
    parse_quorum_voters(value)  # type: ignore[arg-type]
    return None


def _check_quorum_bootstrap_servers(value: object) -> str | None:
    parse_quorum_bootstrap_servers(value)  # type: ignore[arg-type]
    return None


# ---------------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------------


def _table(rows: Iterable[tuple]) -> dict[str, ConfigKey]:
    table: dict[str, ConfigKey] = {}
    for row in rows:
        name, type_, default, validator, doc, *rest = row
        table[name] = ConfigKey(name, type_, default, validator, doc, *(rest or []))
    return table


_DAY_MS = 24 * _HOUR_MS
_CLEANUP = ("compact", "delete")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_TOPIC_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_DEFAULT_PROTOCOL_MAP = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
"""Kafka's SecurityProtocol ids, as BrokerRegistration and RegisterBrokerRecord carry them."""

BROKER_CONFIGS: dict[str, ConfigKey] = _table(
    [
        # --- identity and listeners
        ("node.id", "int", -1, at_least(0), "The node id of this broker (KRaft); kcli defaults to 1."),
        ("broker.id", "int", -1, None, "Legacy broker id; must equal node.id when set."),
        (
            "process.roles",
            "list",
            [],
            list_of("broker", "controller"),
            "Roles of this node: broker, controller, or both; kcli: broker,controller.",
        ),
        (
            "controller.quorum.voters",
            "list",
            [],
            _check_quorum_voters,
            "Static controller quorum as {id}@{host}:{port} entries; kcli: this node alone.",
        ),
        (
            "controller.quorum.bootstrap.servers",
            "list",
            [],
            _check_quorum_bootstrap_servers,
            "Controller endpoints ({host}:{port}) used to find the quorum (dynamic quorum).",
        ),
        (
            "controller.quorum.election.timeout.ms",
            "int",
            1000,
            at_least(0),
            "Time without a fetch from the leader before a new election.",
        ),
        (
            "controller.quorum.fetch.timeout.ms",
            "int",
            2000,
            at_least(0),
            "Time without a successful fetch before a voter becomes a candidate, or a leader resigns.",
        ),
        (
            "controller.quorum.election.backoff.max.ms",
            "int",
            1000,
            at_least(0),
            "Largest backoff before a new election.",
        ),
        (
            "controller.quorum.request.timeout.ms",
            "int",
            2000,
            at_least(0),
            "Timeout of quorum requests.",
        ),
        (
            "controller.quorum.retry.backoff.ms",
            "int",
            20,
            at_least(0),
            "Backoff before a quorum request is retried.",
        ),
        (
            "controller.quorum.append.linger.ms",
            "int",
            25,
            at_least(0),
            "How long the leader gathers writes before flushing them.",
        ),
        (
            "broker.heartbeat.interval.ms",
            "int",
            2000,
            None,
            "Time between a broker's heartbeats to the controller.",
        ),
        (
            "broker.session.timeout.ms",
            "int",
            9000,
            None,
            "A broker that has not heartbeated for this long is fenced.",
        ),
        (
            "initial.broker.registration.timeout.ms",
            "int",
            60000,
            None,
            "How long a broker waits to register with the controller quorum at start-up.",
        ),
        (
            "controller.listener.names",
            "list",
            [],
            None,
            "Listener names used by the controller; skipped for clients.",
        ),
        ("inter.broker.listener.name", "string", None, None, "Listener for inter-broker traffic."),
        (
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", case_sensitive=False),
            "Inter-broker security protocol (used when inter.broker.listener.name is unset).",
        ),
        (
            "listeners",
            "listeners",
            parse_listeners("PLAINTEXT://:9092"),
            None,
            "NAME://host:port entries to bind; kcli binds 127.0.0.1:9092 by default.",
        ),
        (
            "advertised.listeners",
            "listeners",
            None,
            None,
            "Addresses clients are told to use; defaults to listeners.",
        ),
        (
            "listener.security.protocol.map",
            "protocol_map",
            _DEFAULT_PROTOCOL_MAP,
            None,
            "Listener name to security protocol.",
        ),
        ("broker.rack", "string", None, None, "Rack of this broker, reported in Metadata."),
        # --- TLS (Kafka's SslConfigs and BrokerSecurityConfigs); listener.name.<name>.ssl.* overrides
        ("ssl.protocol", "string", "TLSv1.3", one_of("TLSv1.2", "TLSv1.3", "TLS"), "TLS protocol."),
        ("ssl.provider", "string", None, None, "Security provider (Java).", False),
        ("ssl.cipher.suites", "list", [], None, "Cipher suites (Java's or OpenSSL's names); empty: all."),
        (
            "ssl.enabled.protocols",
            "list",
            ["TLSv1.2", "TLSv1.3"],
            list_of("TLSv1.2", "TLSv1.3"),
            "TLS versions enabled.",
        ),
        (
            "ssl.keystore.type",
            "string",
            "JKS",
            one_of("JKS", "PKCS12", "PEM", case_sensitive=False),
            "Keystore format (kcli reads PKCS12 and PEM).",
        ),
        ("ssl.keystore.location", "string", None, None, "Keystore file."),
        ("ssl.keystore.password", "password", None, None, "Keystore password."),
        ("ssl.key.password", "password", None, None, "Password of the private key."),
        ("ssl.keystore.key", "password", None, None, "Private key as PEM text."),
        ("ssl.keystore.certificate.chain", "password", None, None, "Certificate chain as PEM text."),
        (
            "ssl.truststore.type",
            "string",
            "JKS",
            one_of("JKS", "PKCS12", "PEM", case_sensitive=False),
            "Truststore format (kcli reads PKCS12 and PEM).",
        ),
        ("ssl.truststore.location", "string", None, None, "Truststore file."),
        ("ssl.truststore.password", "password", None, None, "Truststore password."),
        ("ssl.truststore.certificates", "password", None, None, "Trusted certificates as PEM text."),
        ("ssl.keymanager.algorithm", "string", "SunX509", None, "Key manager algorithm (Java).", False),
        ("ssl.trustmanager.algorithm", "string", "PKIX", None, "Trust manager algorithm (Java).", False),
        (
            "ssl.endpoint.identification.algorithm",
            "string",
            "https",
            one_of("https", "", case_sensitive=False),
            "https checks the peer's host name against its certificate; empty does not.",
        ),
        ("ssl.secure.random.implementation", "string", None, None, "SecureRandom (Java).", False),
        ("ssl.engine.factory.class", "class", None, None, "SSL engine factory (Java).", False),
        (
            "ssl.client.auth",
            "string",
            "none",
            one_of("none", "requested", "required"),
            "Whether TLS listeners ask clients for a certificate.",
        ),
        (
            "ssl.principal.mapping.rules",
            "string",
            "DEFAULT",
            None,
            "Rules mapping a client certificate's subject to a principal name.",
        ),
        ("ssl.allow.dn.changes", "boolean", False, None, "Allow a keystore update to change the DN.", False),
        ("ssl.allow.san.changes", "boolean", False, None, "Allow a keystore update to change SANs.", False),
        # --- sockets and requests
        (
            "socket.request.max.bytes",
            "int",
            100 * 1024 * 1024,
            at_least(1),
            "Largest request frame accepted; larger closes the connection.",
        ),
        (
            "socket.send.buffer.bytes",
            "int",
            100 * 1024,
            None,
            "SO_SNDBUF of client sockets; -1 leaves the OS default.",
        ),
        (
            "socket.receive.buffer.bytes",
            "int",
            100 * 1024,
            None,
            "SO_RCVBUF of client sockets; -1 leaves the OS default.",
        ),
        ("socket.listen.backlog.size", "int", 50, at_least(1), "Listen backlog of the server socket."),
        (
            "connections.max.idle.ms",
            "long",
            10 * 60 * 1000,
            None,
            "Idle connections are closed after this long.",
        ),
        # --- SASL (SaslServerAuthenticator); each may carry a listener.name.<listener>. prefix
        (
            "sasl.enabled.mechanisms",
            "list",
            ["GSSAPI"],
            None,
            "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.",
        ),
        (
            "sasl.jaas.config",
            "password",
            None,
            None,
            'JAAS login module line of a SASL listener\'s mechanism (PLAIN users as user_<name>="<password>").',
        ),
        (
            "sasl.mechanism.inter.broker.protocol",
            "string",
            "GSSAPI",
            one_of("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
            "SASL mechanism for inter-broker connections; kcli's brokers talk PLAINTEXT among themselves.",
        ),
        (
            "connections.max.reauth.ms",
            "long",
            0,
            at_least(0),
            "Longest SASL session before the client must re-authenticate (KIP-368); 0: no limit.",
        ),
        (
            "connection.failed.authentication.delay.ms",
            "int",
            100,
            at_least(0),
            "How long a failed authentication waits before its answer and the close.",
        ),
        (
            "sasl.server.max.receive.size",
            "int",
            524288,
            at_least(1),
            "Largest frame accepted before a SASL connection has authenticated.",
        ),
        ("queued.max.requests", "int", 500, at_least(1), "Request queue size.", False),
        ("num.network.threads", "int", 3, at_least(1), "Network threads; kcli uses one event loop.", False),
        (
            "num.io.threads",
            "int",
            8,
            at_least(1),
            "Request handler threads; kcli uses one event loop.",
            False,
        ),
        ("background.threads", "int", 10, at_least(1), "Background threads.", False),
        (
            "request.timeout.ms",
            "int",
            30000,
            at_least(0),
            "Timeout of inter-node requests and of the transaction coordinator's tombstone writes.",
        ),
        (
            "message.max.bytes",
            "int",
            1024 * 1024 + 12,
            at_least(0),
            "Largest record batch accepted (after compression).",
        ),
        (
            "fetch.max.bytes",
            "int",
            55 * 1024 * 1024,
            at_least(1024),
            "Largest fetch response the broker builds.",
        ),
        (
            "max.request.partition.size.limit",
            "int",
            2000,
            at_least(1),
            "Most partitions one DescribeTopicPartitions response carries.",
        ),
        ("delete.topic.enable", "boolean", True, None, "Whether DeleteTopics is allowed."),
        (
            "auto.create.topics.enable",
            "boolean",
            True,
            None,
            "Create a topic on first Metadata/Produce request for it.",
        ),
        ("num.partitions", "int", 1, at_least(1), "Partitions of auto-created topics."),
        ("default.replication.factor", "int", 1, None, "Replication factor of auto-created topics."),
        ("min.insync.replicas", "int", 1, at_least(1), "Replicas that must acknowledge an acks=all produce."),
        (
            "unclean.leader.election.enable",
            "boolean",
            False,
            None,
            "Allow an out-of-sync replica to become leader.",
        ),
        (
            "unclean.leader.election.interval.ms",
            "long",
            300000,
            at_least(1),
            "How often the controller tries unclean elections.",
        ),
        (
            "auto.leader.rebalance.enable",
            "boolean",
            True,
            None,
            "Move leadership back to preferred replicas.",
        ),
        (
            "leader.imbalance.check.interval.seconds",
            "long",
            300,
            at_least(1),
            "How often the controller moves leadership back to preferred replicas.",
        ),
        (
            "replica.lag.time.max.ms",
            "long",
            30000,
            None,
            "A follower not caught up for this long leaves the ISR.",
        ),
        (
            "replication.quota.window.num",
            "int",
            11,
            at_least(1),
            "Samples the replication throttles measure their rate over.",
        ),
        (
            "replication.quota.window.size.seconds",
            "int",
            1,
            at_least(1),
            "Length of each sample of the replication throttles.",
        ),
        (
            "replica.fetch.max.bytes",
            "int",
            1024 * 1024,
            at_least(0),
            "Bytes per partition a follower fetches.",
        ),
        (
            "replica.fetch.response.max.bytes",
            "int",
            10 * 1024 * 1024,
            at_least(0),
            "Bytes per fetch response a follower asks for.",
        ),
        (
            "replica.fetch.wait.max.ms",
            "int",
            500,
            at_least(0),
            "How long a follower's fetch waits at the leader for new records.",
        ),
        ("replica.fetch.min.bytes", "int", 1, at_least(0), "Bytes a follower's fetch waits for."),
        (
            "replica.fetch.backoff.ms",
            "int",
            1000,
            at_least(0),
            "How long a follower waits after a failed fetch.",
        ),
        (
            "replica.socket.timeout.ms",
            "int",
            30000,
            None,
            "How long a follower waits for the leader's answer beyond the fetch wait.",
        ),
        (
            "replica.selector.class",
            "string",
            None,
            one_of("org.apache.kafka.common.replica.RackAwareReplicaSelector"),
            "Picks the replica a consumer fetches from (KIP-392); unset, consumers read from the leader.",
        ),
        (
            "replica.high.watermark.checkpoint.interval.ms",
            "long",
            5000,
            None,
            "How often replication-offset-checkpoint is written.",
        ),
        (
            "replica.alter.log.dirs.io.max.bytes.per.second",
            "long",
            2**63 - 1,
            at_least(0),
            "Bytes per second the copy of replicas between log dirs of this broker may read and write.",
        ),
        (
            "compression.type",
            "string",
            "producer",
            one_of(*_TOPIC_COMPRESSION),
            "Codec applied by the broker; producer keeps the producer's.",
        ),
        (
            "compression.gzip.level",
            "int",
            -1,
            _compression_level(1, 9, -1),
            "gzip level when the broker compresses.",
        ),
        (
            "compression.lz4.level",
            "int",
            9,
            _compression_level(1, 17),
            "lz4 level when the broker compresses.",
        ),
        (
            "compression.zstd.level",
            "int",
            3,
            _compression_level(-131072, 22),
            "zstd level when the broker compresses.",
        ),
        # --- log dirs and segments
        ("log.dirs", "list", None, None, "Comma-separated data directories; overrides log.dir."),
        (
            "log.dir",
            "string",
            "/tmp/kafka-logs",
            None,
            "Data directory when log.dirs is unset; kcli: ./kcli-data.",
        ),
        ("log.segment.bytes", "int", 1024 * 1024 * 1024, at_least(14), "Roll a segment at this size."),
        ("log.roll.ms", "long", None, None, "Roll a segment after this long; overrides log.roll.hours."),
        ("log.roll.hours", "int", 168, at_least(1), "Roll a segment after this many hours."),
        ("log.roll.jitter.ms", "long", None, None, "Random jitter subtracted from the roll time."),
        ("log.roll.jitter.hours", "int", 0, at_least(0), "Roll jitter in hours."),
        ("log.retention.ms", "long", None, None, "Delete segments older than this; -1 keeps forever."),
        ("log.retention.minutes", "int", None, None, "Retention in minutes when log.retention.ms is unset."),
        ("log.retention.hours", "int", 168, None, "Retention in hours when ms and minutes are unset."),
        (
            "log.retention.bytes",
            "long",
            -1,
            None,
            "Delete old segments while a partition is larger; -1 = no limit.",
        ),
        ("log.retention.check.interval.ms", "long", 5 * 60 * 1000, at_least(1), "How often retention runs."),
        ("log.cleanup.policy", "list", ["delete"], list_of(*_CLEANUP), "delete, compact, or both."),
        ("log.index.interval.bytes", "int", 4096, at_least(0), "Bytes between offset-index entries."),
        (
            "log.index.size.max.bytes",
            "int",
            10 * 1024 * 1024,
            at_least(4),
            "Preallocated size of each index file.",
        ),
        ("log.flush.interval.messages", "long", LONG_MAX, at_least(1), "fsync after this many messages."),
        (
            "log.flush.interval.ms",
            "long",
            None,
            None,
            "fsync after this long; defaults to log.flush.scheduler.interval.ms.",
        ),
        ("log.flush.scheduler.interval.ms", "long", LONG_MAX, None, "How often the flusher checks logs."),
        (
            "log.flush.offset.checkpoint.interval.ms",
            "int",
            60000,
            at_least(0),
            "How often recovery-point-offset-checkpoint is written.",
        ),
        (
            "log.flush.start.offset.checkpoint.interval.ms",
            "int",
            60000,
            at_least(0),
            "How often log-start-offset-checkpoint is written.",
        ),
        ("log.segment.delete.delay.ms", "long", 60000, at_least(0), "Grace period of .deleted files."),
        ("log.preallocate", "boolean", False, None, "Preallocate segment files."),
        (
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            one_of(*_TIMESTAMP_TYPES),
            "CreateTime or LogAppendTime.",
        ),
        (
            "log.message.timestamp.difference.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "Deprecated bound on timestamp skew.",
        ),
        (
            "log.message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "How far in the past a timestamp may be.",
        ),
        (
            "log.message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "How far in the future a timestamp may be.",
        ),
        ("log.message.downconversion.enable", "boolean", True, None, "Down-convert for old fetchers.", False),
        ("log.message.format.version", "string", "3.0-IV1", None, "Obsolete message format version.", False),
        ("log.cleaner.enable", "boolean", True, None, "Run the log cleaner (compaction)."),
        ("log.cleaner.threads", "int", 1, at_least(0), "Cleaner threads."),
        (
            "log.cleaner.delete.retention.ms",
            "long",
            _DAY_MS,
            at_least(0),
            "How long tombstones are kept after compaction.",
        ),
        (
            "log.cleaner.min.compaction.lag.ms",
            "long",
            0,
            at_least(0),
            "Minimum age before a record may be compacted.",
        ),
        (
            "log.cleaner.max.compaction.lag.ms",
            "long",
            LONG_MAX,
            at_least(1),
            "Maximum age before a record must be compactable.",
        ),
        (
            "log.cleaner.min.cleanable.ratio",
            "double",
            0.5,
            between(0, 1),
            "Dirty ratio that triggers cleaning.",
        ),
        ("log.cleaner.backoff.ms", "long", 15000, at_least(0), "Cleaner sleep when idle."),
        (
            "log.cleaner.dedupe.buffer.size",
            "long",
            128 * 1024 * 1024,
            None,
            "Memory for the cleaners' key maps (shared by all cleaner threads).",
        ),
        ("log.cleaner.io.buffer.size", "int", 512 * 1024, at_least(0), "Cleaner read and write buffers."),
        (
            "log.cleaner.io.buffer.load.factor",
            "double",
            0.9,
            None,
            "How full a cleaner's key map may get.",
        ),
        (
            "log.cleaner.io.max.bytes.per.second",
            "double",
            sys.float_info.max,
            None,
            "Cleaner I/O throttle (read plus write bytes per second).",
        ),
        (
            "num.recovery.threads.per.data.dir",
            "int",
            1,
            at_least(1),
            "Threads that recover logs at start-up.",
        ),
        # --- KRaft metadata log
        (
            "metadata.log.dir",
            "string",
            None,
            None,
            "Directory of __cluster_metadata; defaults to the first log dir.",
        ),
        (
            "metadata.log.segment.bytes",
            "int",
            1024 * 1024 * 1024,
            at_least(12),
            "Segment size of the metadata log.",
        ),
        ("metadata.log.segment.ms", "long", 7 * _DAY_MS, None, "Roll time of the metadata log."),
        (
            "metadata.max.idle.interval.ms",
            "int",
            500,
            at_least(0),
            "How often the active controller appends a NoOpRecord; 0 never.",
        ),
        ("metadata.max.retention.bytes", "long", 100 * 1024 * 1024, None, "Metadata log retention by size."),
        ("metadata.max.retention.ms", "long", 7 * _DAY_MS, None, "Metadata log retention by time."),
        (
            "metadata.log.max.record.bytes.between.snapshots",
            "long",
            20 * 1024 * 1024,
            at_least(1),
            "Snapshot after this many bytes.",
        ),
        (
            "metadata.log.max.snapshot.interval.ms",
            "long",
            _HOUR_MS,
            at_least(0),
            "Snapshot at least this often.",
        ),
        # --- groups and offsets
        ("offsets.topic.num.partitions", "int", 50, at_least(1), "Partitions of __consumer_offsets."),
        (
            "offsets.topic.replication.factor",
            "short",
            3,
            at_least(1),
            "Replication factor of __consumer_offsets; kcli: 1.",
        ),
        (
            "offsets.topic.segment.bytes",
            "int",
            100 * 1024 * 1024,
            at_least(1),
            "Segment size of __consumer_offsets.",
        ),
        (
            "offsets.retention.minutes",
            "int",
            7 * 24 * 60,
            at_least(1),
            "How long committed offsets of empty groups live.",
        ),
        (
            "offsets.retention.check.interval.ms",
            "long",
            600000,
            at_least(1),
            "How often stale offsets are removed.",
        ),
        ("offset.metadata.max.bytes", "int", 4096, None, "Largest metadata string of a commit."),
        (
            "offsets.commit.timeout.ms",
            "int",
            5000,
            at_least(1),
            "How long an offset commit or group write waits to be committed before it fails.",
        ),
        (
            "group.initial.rebalance.delay.ms",
            "int",
            3000,
            None,
            "Wait for more members before the first rebalance.",
        ),
        ("group.min.session.timeout.ms", "int", 6000, None, "Smallest session timeout a member may ask for."),
        (
            "group.max.session.timeout.ms",
            "int",
            1800000,
            None,
            "Largest session timeout a member may ask for.",
        ),
        ("group.max.size", "int", INT_MAX, at_least(1), "Most members in one classic group."),
        # --- transactions and producers
        (
            "transaction.state.log.num.partitions",
            "int",
            50,
            at_least(1),
            "Partitions of __transaction_state.",
        ),
        (
            "transaction.state.log.replication.factor",
            "short",
            3,
            at_least(1),
            "Replication factor of __transaction_state; kcli: 1.",
        ),
        (
            "transaction.state.log.min.isr",
            "int",
            2,
            at_least(1),
            "min.insync.replicas of __transaction_state; kcli: 1.",
        ),
        (
            "transaction.state.log.segment.bytes",
            "int",
            100 * 1024 * 1024,
            at_least(1),
            "Segment size of __transaction_state.",
        ),
        (
            "transaction.max.timeout.ms",
            "int",
            15 * 60 * 1000,
            at_least(1),
            "Largest transaction timeout a producer may ask for.",
        ),
        (
            "transactional.id.expiration.ms",
            "int",
            7 * _DAY_MS,
            at_least(1),
            "Idle transactional ids expire after this long.",
        ),
        (
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "int",
            10_000,
            at_least(1),
            "How often Ongoing transactions past their timeout are looked for and aborted.",
        ),
        (
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            "int",
            3_600_000,
            at_least(1),
            "How often idle transactional ids are looked for and expired.",
        ),
        (
            "producer.id.expiration.ms",
            "int",
            _DAY_MS,
            at_least(1),
            "Idle producer ids expire after this long.",
        ),
        (
            "producer.id.expiration.check.interval.ms",
            "int",
            600_000,
            at_least(1),
            "How often expired producer ids are removed.",
        ),
        # --- accepted for compatibility with Kafka's shipped files
        ("share.coordinator.state.topic.replication.factor", "short", 3, at_least(1), "Share groups.", False),
        ("share.coordinator.state.topic.min.isr", "short", 2, at_least(1), "Share groups.", False),
        ("zookeeper.connect", "string", None, None, "ZooKeeper mode is not supported; ignored.", False),
        ("controlled.shutdown.enable", "boolean", True, None, "Controlled shutdown.", False),
        (
            "group.coordinator.rebalance.protocols",
            "list",
            ["classic", "consumer"],
            None,
            "Rebalance protocols.",
            False,
        ),
    ]
)

KCLI_DEFAULTS: dict[str, object] = {
    # What `kcli broker start` needs with no configuration at all: one node on loopback that is its own
    # controller (a quorum of one), data in ./kcli-data, and internal topics that fit on one broker (as Kafka's config/kraft/server.properties).
    "node.id": 1,
    "process.roles": ["broker", "controller"],
    "listeners": parse_listeners("PLAINTEXT://127.0.0.1:9092"),
    "log.dir": "./kcli-data",
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
}

TOPIC_CONFIGS: dict[str, ConfigKey] = _table(
    [
        ("segment.bytes", "int", 1024 * 1024 * 1024, at_least(14), "Roll a segment at this size."),
        ("segment.ms", "long", 7 * _DAY_MS, at_least(1), "Roll a segment after this long."),
        ("segment.jitter.ms", "long", 0, at_least(0), "Random jitter subtracted from segment.ms."),
        (
            "segment.index.bytes",
            "int",
            10 * 1024 * 1024,
            at_least(4),
            "Preallocated size of each index file.",
        ),
        ("flush.messages", "long", LONG_MAX, at_least(1), "fsync after this many messages."),
        ("flush.ms", "long", LONG_MAX, at_least(0), "fsync after this long."),
        (
            "retention.bytes",
            "long",
            -1,
            None,
            "Delete old segments while the partition is larger; -1 = no limit.",
        ),
        (
            "retention.ms",
            "long",
            7 * _DAY_MS,
            at_least(-1),
            "Delete segments older than this; -1 keeps forever.",
        ),
        ("max.message.bytes", "int", 1024 * 1024 + 12, at_least(0), "Largest record batch accepted."),
        ("index.interval.bytes", "int", 4096, at_least(0), "Bytes between offset-index entries."),
        ("delete.retention.ms", "long", _DAY_MS, at_least(0), "How long tombstones survive compaction."),
        ("min.compaction.lag.ms", "long", 0, at_least(0), "Minimum age before compaction."),
        ("max.compaction.lag.ms", "long", LONG_MAX, at_least(1), "Maximum age before compaction."),
        ("file.delete.delay.ms", "long", 60000, at_least(0), "Grace period of .deleted files."),
        ("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1), "Dirty ratio that triggers cleaning."),
        ("cleanup.policy", "list", ["delete"], list_of(*_CLEANUP), "delete, compact, or both."),
        ("unclean.leader.election.enable", "boolean", False, None, "Allow an out-of-sync replica to lead."),
        ("min.insync.replicas", "int", 1, at_least(1), "Replicas that must acknowledge acks=all."),
        ("compression.type", "string", "producer", one_of(*_TOPIC_COMPRESSION), "Codec the broker stores."),
        ("compression.gzip.level", "int", -1, _compression_level(1, 9, -1), "gzip level."),
        ("compression.lz4.level", "int", 9, _compression_level(1, 17), "lz4 level."),
        ("compression.zstd.level", "int", 3, _compression_level(-131072, 22), "zstd level."),
        ("preallocate", "boolean", False, None, "Preallocate segment files."),
        (
            "message.timestamp.type",
            "string",
            "CreateTime",
            one_of(*_TIMESTAMP_TYPES),
            "CreateTime or LogAppendTime.",
        ),
        (
            "message.timestamp.difference.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "Deprecated bound on timestamp skew.",
        ),
        (
            "message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "How far in the past a timestamp may be.",
        ),
        (
            "message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            at_least(0),
            "How far in the future a timestamp may be.",
        ),
        ("message.downconversion.enable", "boolean", True, None, "Down-convert for old fetchers.", False),
        ("message.format.version", "string", "3.0-IV1", None, "Obsolete message format version.", False),
        (
            "leader.replication.throttled.replicas",
            "list",
            [],
            throttled_replica_list("leader.replication.throttled.replicas"),
            "Replicas ([partition]:[broker],... or *) whose leader-side replication is throttled.",
        ),
        (
            "follower.replication.throttled.replicas",
            "list",
            [],
            throttled_replica_list("follower.replication.throttled.replicas"),
            "Replicas ([partition]:[broker],... or *) whose follower-side replication is throttled.",
        ),
        ("remote.storage.enable", "boolean", False, None, "Tiered storage.", False),
        ("local.retention.ms", "long", -2, at_least(-2), "Tiered storage local retention.", False),
        ("local.retention.bytes", "long", -2, at_least(-2), "Tiered storage local retention.", False),
    ]
)

TOPIC_CONFIG_SYNONYMS: dict[str, tuple[Synonym, ...]] = {
    # Kafka's ServerTopicConfigSynonyms: the first synonym that is set wins (derived ones are
    # computed by BrokerConfig: segment.ms, segment.jitter.ms, retention.ms, flush.ms).
    "segment.bytes": (Synonym("log.segment.bytes"),),
    "segment.ms": (Synonym("log.roll.ms"), Synonym("log.roll.hours", _HOUR_MS)),
    "segment.jitter.ms": (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", _HOUR_MS)),
    "segment.index.bytes": (Synonym("log.index.size.max.bytes"),),
    "flush.messages": (Synonym("log.flush.interval.messages"),),
    "flush.ms": (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms")),
    "retention.bytes": (Synonym("log.retention.bytes"),),
    "retention.ms": (
        Synonym("log.retention.ms"),
        Synonym("log.retention.minutes", _MINUTE_MS),
        Synonym("log.retention.hours", _HOUR_MS),
    ),
    "max.message.bytes": (Synonym("message.max.bytes"),),
    "index.interval.bytes": (Synonym("log.index.interval.bytes"),),
    "delete.retention.ms": (Synonym("log.cleaner.delete.retention.ms"),),
    "min.compaction.lag.ms": (Synonym("log.cleaner.min.compaction.lag.ms"),),
    "max.compaction.lag.ms": (Synonym("log.cleaner.max.compaction.lag.ms"),),
    "file.delete.delay.ms": (Synonym("log.segment.delete.delay.ms"),),
    "min.cleanable.dirty.ratio": (Synonym("log.cleaner.min.cleanable.ratio"),),
    "cleanup.policy": (Synonym("log.cleanup.policy"),),
    "unclean.leader.election.enable": (Synonym("unclean.leader.election.enable"),),
    "min.insync.replicas": (Synonym("min.insync.replicas"),),
    "compression.type": (Synonym("compression.type"),),
    "compression.gzip.level": (Synonym("compression.gzip.level"),),
    "compression.lz4.level": (Synonym("compression.lz4.level"),),
    "compression.zstd.level": (Synonym("compression.zstd.level"),),
    "preallocate": (Synonym("log.preallocate"),),
    "message.format.version": (Synonym("log.message.format.version"),),
    "message.timestamp.type": (Synonym("log.message.timestamp.type"),),
    "message.timestamp.difference.max.ms": (Synonym("log.message.timestamp.difference.max.ms"),),
    "message.timestamp.before.max.ms": (Synonym("log.message.timestamp.before.max.ms"),),
    "message.timestamp.after.max.ms": (Synonym("log.message.timestamp.after.max.ms"),),
    "message.downconversion.enable": (Synonym("log.message.downconversion.enable"),),
}


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


def _unknown_key_message(table: Mapping[str, ConfigKey], key: str, source: str, where: str = "") -> str:
    candidates = difflib.get_close_matches(key, list(table), n=1, cutoff=0.6)
    hint = f"; did you mean {candidates[0]!r}?" if candidates else "."
    return f"unknown {source} key {key!r}{' ' + where if where else ''}{hint}"


LISTENER_KEYS = (
    "sasl.enabled.mechanisms",
    "sasl.jaas.config",
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
)
"""Keys that may be set per listener (and the JAAS line and re-authentication per mechanism too)."""


def listener_prefixed_key(key: str) -> str | None:
    """The base key of `listener.name.<listener>.[<mechanism>.]<key>`, None for any other key: the SASL
    keys of LISTENER_KEYS, the JAAS line and re-authentication also per mechanism, and every known
    `ssl.*` key (Kafka's listener prefix override)."""
    if not key.lower().startswith("listener.name."):
        return None
    name, dot, base = key[len("listener.name.") :].partition(".")
    if not name or not dot:
        return None
    if base in LISTENER_KEYS or (base.startswith("ssl.") and base in BROKER_CONFIGS):
        return base
    mechanism, dot, base = base.partition(".")
    if mechanism and dot and base in ("sasl.jaas.config", "connections.max.reauth.ms"):
        return base
    return None


def _check_keys(settings: Mapping[str, str], where: str) -> None:
    for key in settings:
        if key not in BROKER_CONFIGS and listener_prefixed_key(key) is None:
            raise ConfigError(_unknown_key_message(BROKER_CONFIGS, key, "configuration", where))
