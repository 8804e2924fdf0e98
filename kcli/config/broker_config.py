"""`BrokerConfig`: a node's parsed, validated properties plus what Kafka's KafkaConfig derives from them
(listeners, the quorum, security, log roll and retention) and the combinations it refuses; and which
keys a configuration accepts (Kafka's names, listener-prefixed ones too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from kcli.config.broker_configs import BROKER_CONFIGS, KCLI_DEFAULTS
from kcli.config.listeners import SECURITY_PROTOCOL_IDS, Listener
from kcli.config.quorum import parse_quorum_bootstrap_servers, parse_quorum_voters
from kcli.config.topics import TOPIC_CONFIG_SYNONYMS, TOPIC_CONFIGS, parse_topic_value
from kcli.config.types import HOUR_MS, MINUTE_MS, ConfigError
from kcli.config.values import load_properties, parse_override, parse_value, unknown_key_message
from kcli.errors import KcliError
from kcli.security import ClientSecurity
from kcli.security.principal import SslPrincipalMapper

_COMBINED = frozenset({"broker", "controller"})

_CONSUMER_GROUP_TIMEOUT_KEYS = (
    "session.timeout.ms",
    "min.session.timeout.ms",
    "max.session.timeout.ms",
    "heartbeat.interval.ms",
    "min.heartbeat.interval.ms",
    "max.heartbeat.interval.ms",
)


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
            raise ConfigError(unknown_key_message(BROKER_CONFIGS, key, "configuration")) from None
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

    def inter_broker_security(self, ssl_settings: Mapping[str, str] | None = None) -> ClientSecurity:
        """How this broker reaches the others (replication, transaction markers): the inter-broker
        listener's protocol; for TLS its own `ssl.*` settings (its truststore checks the peers, its
        keystore is its client certificate); for SASL `sasl.mechanism.inter.broker.protocol` with the
        username and password of that mechanism's JAAS line, as Kafka's inter-broker client takes them.
        `ssl_settings`: the listener's settings with a renewed keystore over them (the static ones if None)."""
        from kcli.security.jaas import parse_jaas_config

        name = self.inter_broker_listener_name
        protocol = self.protocol_of(name)
        settings = self.ssl_settings(name) if ssl_settings is None else dict(ssl_settings)
        ssl = MappingProxyType(settings) if protocol in ("SSL", "SASL_SSL") else None
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return ClientSecurity(protocol) if ssl is None else ClientSecurity(protocol, ssl=ssl)
        mechanism = str(self["sasl.mechanism.inter.broker.protocol"])
        jaas = self.listener_value(name, "sasl.jaas.config", mechanism)
        source = self.listener_key(name, "sasl.jaas.config", mechanism)
        options = parse_jaas_config(str(jaas), source=source).options if jaas is not None else {}
        extra = {} if ssl is None else {"ssl": ssl}
        return ClientSecurity(protocol=protocol, sasl_mechanism=mechanism, jaas=options, **extra)

    @property
    def controller_listener_name(self) -> str:
        """The first `controller.listener.names` entry: the listener every connection to a controller
        dials (Kafka's RaftManager and RaftControllerNodeProvider take the head of the list)."""
        names = self["controller.listener.names"] or ["CONTROLLER"]  # type: ignore[index]
        return str(names[0]).upper()  # type: ignore[index]

    def controller_security(self, ssl_settings: Mapping[str, str] | None = None) -> ClientSecurity:
        """How this node reaches the controllers (Raft, broker lifecycle, forwarding): the controller
        listener's protocol, its `listener.name.<controller>.ssl.*` settings, and for SASL
        `sasl.mechanism.controller.protocol` with that mechanism's JAAS line of the controller listener,
        as Kafka's ChannelBuilders.clientChannelBuilder is given them (a broker-only node too).
        `ssl_settings`: as for `inter_broker_security`."""
        from kcli.security.jaas import parse_jaas_config

        name = self.controller_listener_name
        protocol = self.protocol_of(name)
        settings = self.ssl_settings(name) if ssl_settings is None else dict(ssl_settings)
        ssl = MappingProxyType(settings) if protocol in ("SSL", "SASL_SSL") else None
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return ClientSecurity(protocol) if ssl is None else ClientSecurity(protocol, ssl=ssl)
        mechanism = str(self["sasl.mechanism.controller.protocol"])
        jaas = self.listener_value(name, "sasl.jaas.config", mechanism)
        source = self.listener_key(name, "sasl.jaas.config", mechanism)
        options = parse_jaas_config(str(jaas), source=source).options if jaas is not None else {}
        extra = {} if ssl is None else {"ssl": ssl}
        return ClientSecurity(protocol=protocol, sasl_mechanism=mechanism, jaas=options, **extra)

    @property
    def log_roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return int(self["log.roll.ms"])  # type: ignore[call-overload]
        return int(self["log.roll.hours"]) * HOUR_MS  # type: ignore[call-overload]

    @property
    def log_roll_jitter_ms(self) -> int:
        if self["log.roll.jitter.ms"] is not None:
            return int(self["log.roll.jitter.ms"])  # type: ignore[call-overload]
        return int(self["log.roll.jitter.hours"]) * HOUR_MS  # type: ignore[call-overload]

    @property
    def log_retention_ms(self) -> int:
        """ms, else minutes, else hours; any negative value means unlimited (-1)."""
        if self["log.retention.ms"] is not None:
            millis = int(self["log.retention.ms"])  # type: ignore[call-overload]
        elif self["log.retention.minutes"] is not None:
            millis = int(self["log.retention.minutes"]) * MINUTE_MS  # type: ignore[call-overload]
        else:
            millis = int(self["log.retention.hours"]) * HOUR_MS  # type: ignore[call-overload]
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

    def _check_consumer_group_timeouts(self) -> None:
        """GroupCoordinatorConfig's checks of the consumer group session timeout and heartbeat interval."""
        prefix = "group.consumer."
        value = {key: int(self[prefix + key]) for key in _CONSUMER_GROUP_TIMEOUT_KEYS}  # type: ignore[call-overload]
        rules = [
            ("max.heartbeat.interval.ms", ">=", "min.heartbeat.interval.ms"),
            ("heartbeat.interval.ms", ">=", "min.heartbeat.interval.ms"),
            ("heartbeat.interval.ms", "<=", "max.heartbeat.interval.ms"),
            ("max.session.timeout.ms", ">=", "min.session.timeout.ms"),
            ("session.timeout.ms", ">=", "min.session.timeout.ms"),
            ("session.timeout.ms", "<=", "max.session.timeout.ms"),
            ("heartbeat.interval.ms", "<", "session.timeout.ms"),
        ]
        words = {">=": "greater than or equal to", "<=": "less than or equal to", "<": "less than"}
        for left, op, right in rules:
            a, b = value[left], value[right]
            ok = a >= b if op == ">=" else a <= b if op == "<=" else a < b
            if not ok:
                raise ConfigError(f"{prefix}{left} must be {words[op]} {prefix}{right}")

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
        self._check_controller_client()
        # a broker-only node configures its controller client under the controller listener's name
        listener_names = {x.name for x in self["listeners"]} | {  # type: ignore[attr-defined]
            str(n).upper()
            for n in self["controller.listener.names"]  # type: ignore[attr-defined]
        }
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
        self._check_consumer_group_timeouts()
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
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            self._check_sasl(listener.name, controller=controller)

    def _check_oauthbearer_handler(self, listener_name: str) -> None:
        """OAUTHBEARER's server callback handler is one of Kafka's two, and the JWKS one has a JWKS URL."""
        from kcli.security.sasl.jwt_validator import SERVER_HANDLERS, UNSECURED_HANDLER

        handler = self.listener_value(listener_name, "sasl.server.callback.handler.class", "OAUTHBEARER")
        key = self.listener_key(listener_name, "sasl.server.callback.handler.class", "OAUTHBEARER")
        if handler is not None and handler not in (*SERVER_HANDLERS, UNSECURED_HANDLER):
            raise ConfigError(
                f"{key}={handler}: kcli runs Kafka's OAUTHBEARER validators only ({SERVER_HANDLERS[0]} with a "
                f"JWKS, or {UNSECURED_HANDLER})."
            )
        if handler in SERVER_HANDLERS:
            url = self.listener_value(listener_name, "sasl.oauthbearer.jwks.endpoint.url")
            if not url:
                raise ConfigError(
                    f"{key}={handler} needs sasl.oauthbearer.jwks.endpoint.url (the JWKS of the tokens' issuer)."
                )
            if str(url).split(":", 1)[0].lower() not in ("file", "http", "https"):
                raise ConfigError(
                    f"sasl.oauthbearer.jwks.endpoint.url {url} is not a file:, http: or https: URL."
                )

    def _check_controller_client(self) -> None:
        """A node in a quorum dials the controller listener as its protocol says: over SASL it needs
        `sasl.mechanism.controller.protocol` enabled there and a login (username and password) for it,
        else no voter or broker could authenticate; Kafka would find out only when connecting."""
        in_a_cluster = bool(self["controller.quorum.voters"] or self["controller.quorum.bootstrap.servers"])
        name = self.controller_listener_name
        protocol = self._protocol_of(name)
        if not in_a_cluster or protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return
        mechanism = str(self["sasl.mechanism.controller.protocol"])
        enabled: list[str] = self.listener_value(name, "sasl.enabled.mechanisms")  # type: ignore[assignment]
        if self.is_controller and mechanism not in enabled:
            raise ConfigError(
                f"sasl.mechanism.controller.protocol {mechanism} must be included in the sasl.enabled.mechanisms "
                f"of controller listener {name} ({', '.join(enabled) or 'none'})."
            )
        if mechanism == "OAUTHBEARER":
            return
        if mechanism == "GSSAPI":
            from kcli.security.sasl import GSSAPI_REFUSAL

            raise ConfigError(f"sasl.mechanism.controller.protocol: {GSSAPI_REFUSAL}")
        options = self.controller_security().jaas
        if not options.get("username") or "password" not in options:
            raise ConfigError(
                f"controller listener {name}: SASL/{mechanism} to the controllers needs username and password in "
                f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config."
            )

    def _check_sasl(self, listener_name: str, *, controller: bool = False) -> None:
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
        if "OAUTHBEARER" in enabled:
            self._check_oauthbearer_handler(listener_name)
        delay, idle = self["connection.failed.authentication.delay.ms"], self["connections.max.idle.ms"]
        if delay >= idle:  # type: ignore[operator]
            raise ConfigError(
                f"connection.failed.authentication.delay.ms={delay} should always be less than "
                f"connections.max.idle.ms={idle} to prevent failed authentication responses from timing out"
            )
        if (
            controller
        ):  # its clients log in with sasl.mechanism.controller.protocol (_check_controller_client)
            return
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


OAUTHBEARER_KEYS = (
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.clock.skew.seconds",
)
"""The settings of OAUTHBEARER's JWKS validator (`kcli.security.sasl.jwt_validator`)."""

LISTENER_KEYS = (
    "sasl.enabled.mechanisms",
    "sasl.jaas.config",
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
    "max.connections",
    "max.connection.creation.rate",
    "sasl.server.callback.handler.class",
    *OAUTHBEARER_KEYS,
)
"""Keys that may be set per listener (and the JAAS line and re-authentication per mechanism too)."""


PER_MECHANISM_KEYS = ("sasl.jaas.config", "connections.max.reauth.ms", "sasl.server.callback.handler.class")
"""Keys that may also be set per listener and mechanism (`listener.name.<l>.<mechanism>.<key>`)."""


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
    if mechanism and dot and base in PER_MECHANISM_KEYS:
        return base
    return None


def _check_keys(settings: Mapping[str, str], where: str) -> None:
    for key in settings:
        if key not in BROKER_CONFIGS and listener_prefixed_key(key) is None:
            raise ConfigError(unknown_key_message(BROKER_CONFIGS, key, "configuration", where))
