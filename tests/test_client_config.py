"""Client properties files (--command-config, --admin.config, --producer.config): Kafka's and
librdkafka's spellings read into one ClientSecurity, every refusal one sentence that names no secret,
and a PLAINTEXT file used for real against a kcli broker."""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

import pytest
from cli_in_process import run_kcli
from conftest import KCLI, REPO, BrokerProcess, kcli_env
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from kcli.config import parse_properties
from kcli.security import SECRET_MARK
from kcli.security.client_config import (
    ClientConfigError,
    load_client_config,
    parse_client_config,
    parse_jaas_config,
)

SECRET = "hunter2-Sekr3t"
"""Every password and secret in these files: it must never be printed."""


def parsed(text: str, **kwargs) -> object:
    return parse_client_config(parse_properties(text), **kwargs)


# --- files a TLS client presents -------------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real self-signed certificate as PEM files and a PKCS12 store, and a JKS store's header."""
    root = tmp_path_factory.mktemp("stores")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kcli-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    paths = {
        "ca": root / "ca.pem",
        "cert": root / "client.crt",
        "key": root / "client.key",
        "p12": root / "client.p12",
        "dir": root,
    }
    paths["ca"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(SECRET.encode()),
        )
    )
    paths["p12"].write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"client", key, cert, None, serialization.BestAvailableEncryption(SECRET.encode())
        )
    )
    # A JKS store as keytool writes it begins with the magic 0xFEEDFEED and version 2; the rest is not read.
    paths["jks"] = root / "truststore.jks"
    paths["jks"].write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + bytes(64))
    return paths


# --- Kafka's spelling ------------------------------------------------------------------------------


def test_kafka_names_with_continuations_comments_and_jaas_quoting(stores: dict[str, Path]) -> None:
    config = parsed(
        "# a client.properties as Kafka's docs write it\n"
        "! comments of both kinds\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="ops-user" \\\n'
        '    password="' + SECRET + '\\\\"q\\\\\\\\;";\n'
        f"ssl.truststore.location {stores['ca']}\n"
        "ssl.truststore.type=pem\n"
        "client.id=ops-tools\n"
        "request.timeout.ms=12000\n"
        "default.api.timeout.ms=60000\n"
        "socket.connection.setup.timeout.ms=7000\n"
        "retries=5\n"
    )
    s = config.security
    assert (s.protocol, s.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    # the properties file undoes one level of escapes, the JAAS tokenizer the next: \" and \\ in the quotes
    assert dict(s.jaas) == {"username": "ops-user", "password": SECRET + '"q\\;'}
    assert dict(s.ssl) == {
        "ssl.truststore.location": str(stores["ca"]),
        "ssl.truststore.type": "PEM",
        "ssl.protocol": "TLSv1.3",
        "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert config.client_id == "ops-tools"
    assert dict(config.timeouts_ms) == {
        "request.timeout.ms": 12000,
        "default.api.timeout.ms": 60000,
        "socket.connection.setup.timeout.ms": 7000,
    }
    assert config.unused == ()  # retries is an admin client setting: accepted, no effect


def test_pkcs12_keystore_is_recognised_and_endpoint_check_can_be_turned_off(stores: dict[str, Path]) -> None:
    config = parsed(
        "security.protocol=SSL\n"
        f"ssl.keystore.location={stores['p12']}\n"
        f"ssl.keystore.password={SECRET}\n"
        f"ssl.key.password={SECRET}\n"
        "ssl.endpoint.identification.algorithm=\n"
        "ssl.enabled.protocols=TLSv1.3\n"
        "ssl.cipher.suites=TLS_AES_128_GCM_SHA256\n"
    )
    ssl = dict(config.security.ssl)
    assert ssl["ssl.keystore.type"] == "PKCS12"  # unset: read from the file, not Kafka's JKS default
    assert ssl["ssl.keystore.location"] == str(stores["p12"])
    assert ssl["ssl.keystore.password"] == ssl["ssl.key.password"] == SECRET
    assert ssl["ssl.endpoint.identification.algorithm"] == ""
    assert (ssl["ssl.enabled.protocols"], ssl["ssl.cipher.suites"]) == ("TLSv1.3", "TLS_AES_128_GCM_SHA256")
    assert "ssl.truststore.type" not in ssl  # the system's CAs


def test_a_controllers_own_configuration_gives_its_client_settings() -> None:
    """quorum add-controller's file is the joining controller's server.properties: its broker settings
    are skipped, its client settings used."""
    config = parsed(
        "process.roles=controller\nnode.id=3\nlisteners=CONTROLLER://:9093\nlog.dirs=/var/kafka\n"
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username=admin\nsasl.password={SECRET}\n",
        role="server",
    )
    assert (config.security.protocol, dict(config.security.jaas)) == (
        "SASL_PLAINTEXT",
        {"username": "admin", "password": SECRET},
    )
    with pytest.raises(ClientConfigError, match="node.id is not a Kafka client setting"):
        parsed("node.id=3\n")


def test_a_store_type_without_a_store_changes_nothing() -> None:
    """Kafka's default (JKS) written out, with no store to open: the system's CAs, nothing refused."""
    config = parsed(f"security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.password={SECRET}\n")
    assert not any(key.startswith("ssl.truststore") for key in config.security.ssl)


def test_a_store_whose_bytes_contradict_its_type_is_refused(stores: dict[str, Path]) -> None:
    with pytest.raises(ClientConfigError, match="is PEM, not the ssl.truststore.type PKCS12"):
        parsed(f"security.protocol=SSL\nssl.truststore.type=PKCS12\nssl.truststore.location={stores['ca']}\n")
    with pytest.raises(
        ClientConfigError, match="ssl.keystore.key and ssl.keystore.certificate.chain go together"
    ):
        parsed("security.protocol=SSL\nssl.keystore.certificate.chain=-----BEGIN CERTIFICATE-----\n")


def test_inline_pem_stores(stores: dict[str, Path]) -> None:
    def inline(text: str) -> str:
        return "\\n\\\n".join(text.strip().splitlines())

    config = parsed(
        "security.protocol=SSL\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.truststore.certificates={inline(stores['ca'].read_text())}\n"
        f"ssl.keystore.certificate.chain={inline(stores['cert'].read_text())}\n"
        f"ssl.keystore.key={inline(stores['key'].read_text())}\n"
        f"ssl.key.password={SECRET}\n"
    )
    ssl = dict(config.security.ssl)
    assert ssl["ssl.truststore.type"] == ssl["ssl.keystore.type"] == "PEM"
    assert ssl["ssl.truststore.certificates"] == stores["ca"].read_text().strip()
    assert ssl["ssl.keystore.key"] == stores["key"].read_text().strip()
    assert ssl["ssl.keystore.certificate.chain"] == stores["cert"].read_text().strip()


def test_oauthbearer_unsecured_and_against_a_token_endpoint() -> None:
    unsecured = parsed(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        "unsecuredLoginStringClaim_sub='admin' unsecuredLoginLifetimeSeconds=\"3600\";\n"
    )
    assert dict(unsecured.security.jaas) == {
        "unsecuredLoginStringClaim_sub": "admin",
        "unsecuredLoginLifetimeSeconds": "3600",
    }
    oidc = parsed(
        "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp.example/token\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "sasl.login.connect.timeout.ms=5000\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="kcli" clientSecret="{SECRET}" scope="kafka" extension_logicalCluster="lkc-1";\n'
    )
    assert dict(oidc.security.jaas) == {
        "clientId": "kcli",
        "clientSecret": SECRET,
        "scope": "kafka",
        "extension_logicalCluster": "lkc-1",
    }
    assert dict(oidc.security.sasl) == {
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.login.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        ),
        "sasl.login.connect.timeout.ms": "5000",
    }


# --- librdkafka's spelling -------------------------------------------------------------------------


def test_librdkafka_names_become_kafkas(stores: dict[str, Path]) -> None:
    config = parsed(
        "security.protocol=sasl_ssl\n"
        "sasl.mechanisms=PLAIN\n"
        "sasl.username=ops-user\n"
        f"sasl.password={SECRET}\n"
        f"ssl.ca.location={stores['ca']}\n"
        f"ssl.certificate.location={stores['cert']}\n"
        f"ssl.key.location={stores['key']}\n"
        f"ssl.key.password={SECRET}\n"
        "ssl.endpoint.identification.algorithm=none\n"
        "enable.ssl.certificate.verification=false\n"
    )
    s = config.security
    assert (s.protocol, s.sasl_mechanism) == ("SASL_SSL", "PLAIN")
    assert dict(s.jaas) == {"username": "ops-user", "password": SECRET}
    assert dict(s.ssl) == {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(stores["ca"]),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": stores["cert"].read_text(),
        "ssl.keystore.key": stores["key"].read_text(),
        "ssl.key.password": SECRET,
        "ssl.protocol": "TLSv1.3",
        "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
        "ssl.endpoint.identification.algorithm": "",
        "enable.ssl.certificate.verification": "false",
    }


def test_librdkafka_oauthbearer_settings() -> None:
    oidc = parsed(
        "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\nsasl.oauthbearer.method=oidc\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp.example/token\n"
        f"sasl.oauthbearer.client.id=kcli\nsasl.oauthbearer.client.secret={SECRET}\n"
        "sasl.oauthbearer.scope=kafka\nsasl.oauthbearer.extensions=logicalCluster=lkc-1,pool=p\n"
    )
    assert dict(oidc.security.jaas) == {
        "clientId": "kcli",
        "clientSecret": SECRET,
        "scope": "kafka",
        "extension_logicalCluster": "lkc-1",
        "extension_pool": "p",
    }
    unsecured = parsed(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=OAUTHBEARER\n"
        "enable.sasl.oauthbearer.unsecure.jwt=true\n"
        "sasl.oauthbearer.config=principal=admin lifeSeconds=600 extension_traceId=7\n"
    )
    assert dict(unsecured.security.jaas) == {
        "unsecuredLoginStringClaim_sub": "admin",
        "unsecuredLoginLifetimeSeconds": "600",
        "unsecuredLoginExtension_traceId": "7",
    }


# --- the JAAS line ---------------------------------------------------------------------------------


def test_jaas_tokenizing_as_kafkas_streamtokenizer() -> None:
    module, options = parse_jaas_config(
        "/* a comment */ org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED // to the end\n"
        "  username=alice.ops-1_$ password='p w' / a lone slash comments out the rest of its line\n;"
    )
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": "alice.ops-1_$", "password": "p w"}


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=1abc;",
            "option username is not name=value",
        ),
        # a value that needed quotes: what is left of it is not echoed as an option name
        (
            f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password=x {SECRET};',
            "option 3 is not",
        ),
        (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required password=x@{SECRET};",
            "option 2 is not",
        ),
        ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u"', "semicolon"),
        ("org.apache.kafka.common.security.plain.PlainLoginModule", "control flag"),
        ("org.apache.kafka.common.security.plain.PlainLoginModule mandatory;", "control flag"),
        ("", "no login module"),
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required;"
            "org.apache.kafka.common.security.plain.PlainLoginModule required;",
            "2 login modules",
        ),
        ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;", "GSSAPI (Kerberos)"),
        ("io.example.CustomLoginModule required;", "is not supported by kcli"),
    ],
)
def test_jaas_mistakes_are_one_sentence(line: str, words: str) -> None:
    with pytest.raises(ClientConfigError) as raised:
        parse_jaas_config(line)
    assert words in str(raised.value) and SECRET not in str(raised.value)


def test_jaas_with_quoted_options_and_escapes() -> None:
    _, options = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required tab="a\\tb" octal="\\101x" '
        'single=\'s p a c e\' empty="" quote="say \\"hi\\"";'
    )
    assert options == {"tab": "a\tb", "octal": "Ax", "single": "s p a c e", "empty": "", "quote": 'say "hi"'}


# --- refusals --------------------------------------------------------------------------------------

JAAS_PLAIN = (
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="u" password="{SECRET}";\n'
)
REFUSED = {
    "unknown key": (f"security.protocol=PLAINTEXT\nssl.trustore.location=/x\nsasl.password={SECRET}\n", "ssl.trustore.location is not a Kafka client setting kcli knows (did you mean ssl.truststore.location?)"),
    "kerberos key": (f"security.protocol=SASL_SSL\nsasl.kerberos.service.name=kafka\n{JAAS_PLAIN}", "Kerberos"),
    "gssapi mechanism": (f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n{JAAS_PLAIN}", "GSSAPI (Kerberos) is not supported"),
    "gssapi by default": (f"security.protocol=SASL_SSL\n{JAAS_PLAIN}", "GSSAPI (Kerberos) is not supported"),
    "unknown mechanism": (f"security.protocol=SASL_SSL\nsasl.mechanism=DIGEST-MD5\n{JAAS_PLAIN}", "DIGEST-MD5"),
    "unknown protocol": ("security.protocol=TLS\n", "security.protocol 'TLS'"),
    "jks type": (f"security.protocol=SSL\nssl.keystore.type=JKS\nssl.keystore.location=k.jks\nssl.keystore.password={SECRET}\n", "JKS keystores are not supported"),
    "missing truststore": (f"security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\nssl.truststore.password={SECRET}\n", "/nonexistent/ca.pem"),
    "java class": (f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.client.callback.handler.class=com.example.H\n{JAAS_PLAIN}", "Java class"),
    "both spellings": (f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password={SECRET}\n{JAAS_PLAIN}", "not both"),
    "no credentials": ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n", "username and password"),
    "pem store password": (f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.certificates=-----BEGIN CERTIFICATE-----\nssl.truststore.password={SECRET}\n", "PEM truststore"),
    "module for another mechanism": (f"security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n{JAAS_PLAIN}", "PlainLoginModule cannot log in"),
    "bad jaas": (f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password=\"{SECRET}\"\n", "semicolon"),
    "bad timeout": ("request.timeout.ms=soon\n", "request.timeout.ms"),
    "zero timeout": ("socket.connection.setup.timeout.ms=0\n", "from 1 to"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_each_refusal_is_one_sentence_without_a_secret(case: str, tmp_path: Path) -> None:
    text, words = REFUSED[case]
    path = tmp_path / "client.properties"
    path.write_text(text)
    with pytest.raises(ClientConfigError) as raised:
        load_client_config(path)
    sentence = str(raised.value)
    assert words in sentence and sentence.startswith(f"{path}: ") and sentence.endswith(".")
    assert SECRET not in sentence and "\n" not in sentence
    result = run_kcli("topics", "list", "-b", "127.0.0.1:1", "--command-config", str(path))
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"kcli: {sentence}\n")


def test_jks_found_by_its_bytes_names_keytool(stores: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        f"security.protocol=SSL\nssl.truststore.location={stores['jks']}\nssl.truststore.password={SECRET}\n"
    )
    with pytest.raises(ClientConfigError) as raised:
        load_client_config(path)
    assert "JKS truststores are not supported; convert" in str(raised.value)
    assert "keytool -importkeystore" in str(raised.value) and SECRET not in str(raised.value)


def test_a_missing_or_directory_config_is_named(tmp_path: Path) -> None:
    for path, words in ((tmp_path / "nope.properties", "no such file"), (tmp_path, "it is a directory")):
        result = run_kcli("cluster", "status", "-b", "127.0.0.1:1", "--command-config", str(path))
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == f"kcli: cannot read client config {path}: {words}.\n"


def test_secrets_stay_out_of_reprs_and_descriptions(stores: dict[str, Path]) -> None:
    config = parsed(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        + JAAS_PLAIN
        + f"ssl.keystore.location={stores['p12']}\nssl.keystore.password={SECRET}\n"
        + f"ssl.key.password={SECRET}\nssl.truststore.location={stores['ca']}\n"
    )
    shown = config.describe()
    assert (
        shown["sasl.jaas.config"]
        == shown["ssl.keystore.password"]
        == shown["ssl.key.password"]
        == SECRET_MARK
    )
    assert shown["ssl.truststore.location"] == str(stores["ca"])
    for text in (repr(config), repr(config.security), str(shown)):
        assert SECRET not in text


# --- through the real entry point ------------------------------------------------------------------


def _python_m_kcli(*args: str, debug: bool = False) -> subprocess.CompletedProcess[str]:
    env = kcli_env()
    argv = [*KCLI, *(("--debug",) if debug else ()), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=60)


def test_python_m_kcli_refuses_in_one_line_and_never_prints_a_secret(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n{JAAS_PLAIN}")
    result = _python_m_kcli("topics", "list", "--command-config", str(bad))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"kcli: {bad}: SASL mechanism GSSAPI (Kerberos) is not supported by kcli; use PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.\n"
    )
    debugged = _python_m_kcli("topics", "list", "--command-config", str(bad), debug=True)
    assert debugged.returncode != 0 and "GSSAPI (Kerberos)" in debugged.stderr  # a traceback, asked for
    assert SECRET not in debugged.stderr + debugged.stdout


def test_a_secured_config_reaching_connect_is_one_clean_sentence(tmp_path: Path) -> None:
    """Until TLS and SASL are there, connect refuses them: the sentence is clean, whatever it says."""
    secured = tmp_path / "client.properties"
    secured.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n{JAAS_PLAIN}")
    for debug in (False, True):
        result = _python_m_kcli(
            "topics", "list", "-b", "127.0.0.1:1", "--command-config", str(secured), debug=debug
        )
        assert result.returncode != 0 and result.stdout == ""
        assert SECRET not in result.stderr
        if not debug:
            assert result.stderr.startswith("kcli: ") and result.stderr.count("\n") == 1, result.stderr
            assert "Traceback" not in result.stderr


# --- PLAINTEXT against a kcli broker ---------------------------------------------------------------


def test_a_plaintext_config_drives_several_commands(broker: BrokerProcess, tmp_path: Path) -> None:
    """bootstrap.servers comes from the file when -b is not given; client.id and the timeouts are used;
    a producer setting in a shared file is only warned about."""
    config = tmp_path / "client.properties"
    config.write_text(
        f"bootstrap.servers={broker.bootstrap}\nsecurity.protocol=PLAINTEXT\nclient.id=ops-tools\n"
        "request.timeout.ms=15000\nsocket.connection.setup.timeout.ms=5000\nconnections.max.idle.ms=540000\n"
        "retries=3\n"
    )
    opt = ("--command-config", str(config))
    created = run_kcli("topics", "create", *opt, "-t", "secured-orders", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = run_kcli("topics", "list", *opt)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert "secured-orders" in listed.stdout.split()
    for argv in (
        ("configs", "describe", *opt, "--topic", "secured-orders"),
        ("groups", "list", *opt),
        ("cluster", "status", *opt),
        ("features", "describe", *opt),
        ("transactions", "list", *opt),
        ("reassign", "list", *opt),
        ("quorum", "--bootstrap-server", broker.bootstrap, *opt, "describe", "--status"),
    ):
        result = run_kcli(*argv)
        assert (result.returncode, result.stderr) == (0, ""), argv
    config.write_text(config.read_text() + "acks=all\ngroup.id=app\n")
    warned = _python_m_kcli("topics", "describe", *opt, "-t", "secured-orders")
    assert warned.returncode == 0, warned.stderr
    assert warned.stderr == f"kcli: warning: {config}: acks, group.id not used by this command.\n"
    assert "secured-orders" in warned.stdout
    elected = run_kcli(
        "elect", "--election-type", "preferred", "--all-topic-partitions", "--admin.config", str(config)
    )
    assert elected.returncode == 0, elected.stderr


def test_replay_takes_a_producer_config(broker: BrokerProcess, tmp_path: Path) -> None:
    """--producer.config: the connection settings, and enable.idempotence where --idempotence is not given."""
    producer = tmp_path / "producer.properties"
    producer.write_text(
        "security.protocol=PLAINTEXT\nclient.id=replayer\nenable.idempotence=false\nlinger.ms=5\n"
        "compression.type=gzip\n"
    )
    source = REPO / "fixtures" / "logdir" / "m2-none-0"
    result = run_kcli(
        "replay",
        str(source),
        "-b",
        broker.bootstrap,
        "-t",
        "replayed",
        "--producer.config",
        str(producer),
        "-o",
        "json",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == f"kcli: warning: {producer}: linger.ms not used by this command."
    assert '"idempotent":false' in result.stdout.splitlines()[-1]
