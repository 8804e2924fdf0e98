"""ApiVersions (key 18): what the broker handles, and the fallback that lets any client negotiate.

A client sends its newest ApiVersions version before it knows ours. Kafka answers a version it
does not know with the v0 response shape, UNSUPPORTED_VERSION and its own ApiVersions range
(KIP-511), and the client retries with that version; `unsupported_version_response` is that answer.
The server calls it without parsing the body, which may be in a format we cannot read.

Produce is advertised from v0 though only v3+ is handled (a v0-v2 request closes the connection, as
any version outside a handler's range does): Kafka 4.0 does the same (KAFKA-18659,
ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION) because librdkafka before 2.11.1 decides that a
broker takes gzip, snappy and lz4 by asking whether it has Produce v0, and otherwise sends those
batches uncompressed without a word (Debian's kcat, librdkafka 2.0.2, did so against this broker).

From v3 the answer also carries the features (KIP-584): the levels this software supports (a feature
whose minimum is 0 left out below v4, KAFKA-17492, as old clients cannot read it), the finalized
levels of the metadata image and the quorum's kraft.version (level 0 left out) with the image's offset
as their epoch, as Kafka's ApiVersionManager builds them from the broker's metadata cache. kraft.version
0-1 is what AddRaftVoter asks a new voter for (KIP-853).

The versions that mean transaction version 2 (KIP-890 part 2), EndTxn v5 and TxnOffsetCommit v5, are
advertised only once the cluster's finalized transaction.version is 2: below it the handlers still take
them (a client that sends them gets version 2's semantics, as in Kafka, which leaves the choice to the
client's reading of the finalized features), but no client is invited to. Produce v12 and
AddPartitionsToTxn v5 stay advertised at every level, as before: Produce v13 (topic ids) builds on v12,
and AddPartitionsToTxn v5 is the verification brokers already use; Produce adds partitions on the
producer's behalf only at transaction.version 2 (kcli.broker.apis.produce).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import FramedResponse, RequestContext
from kcli.broker.apis.registry import ApiRegistry, ApiSpec
from kcli.broker.metadata.controller.cluster_control_manager import supported_features
from kcli.features import (
    KRAFT_VERSION,
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    supports_epoch_bump,
    transaction_version_level,
)
from kcli.protocol.codec import entity_write
from kcli.protocol.messages import build, kio_versions, nested_type, response_type

API_KEY = 18
PRODUCE = 0
PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION = 0
END_TXN = 26
TXN_OFFSET_COMMIT = 28
TRANSACTIONS_V2_FIRST_VERSIONS = {END_TXN: 5, TXN_OFFSET_COMMIT: 5}
"""The first version of each API that runs transaction version 2: advertised only at that level."""

# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN (checked from v3 on).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_NO_THROTTLE = datetime.timedelta(0)


_ENCODED: dict[tuple[object, ...], bytes] = {}
"""Encoded answers by (version, registry, finalized features, their epoch, kraft.version): every new
connection asks the same question, and encoding the ~70 API ranges and the features was most of the
broker's own CPU for a connection that logs in and leaves."""
_ENCODED_MAX = 64


async def handle_api_versions(ctx: RequestContext, request: object) -> object:
    version = ctx.api_version
    response_cls = response_type(API_KEY, version)
    if version >= 3:
        name = request.client_software_name  # type: ignore[attr-defined]
        software_version = request.client_software_version  # type: ignore[attr-defined]
        if not (_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(software_version)):
            return build(
                response_cls, error_code=ErrorCode.invalid_request, api_keys=(), throttle_time=_NO_THROTTLE
            )
        ctx.connection.client_software_name = name
        ctx.connection.client_software_version = software_version
    image, node = ctx.state.image, ctx.state.node
    kraft_version = node.raft.kraft_version if node is not None else None
    if image.client_quotas:  # a throttle time may be set in the answer: build it afresh
        return _answer(ctx, response_cls, kraft_version)
    key = (version, id(ctx.registry), tuple(sorted(image.features.items())), image.offset, kraft_version)
    body = _ENCODED.get(key)
    if body is None:
        out = bytearray()
        entity_write(response_cls)(out, _answer(ctx, response_cls, kraft_version))
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        body = _ENCODED[key] = bytes(out)
    return FramedResponse(response_cls, (body,))


def _answer(ctx: RequestContext, response_cls: type, kraft_version: int | None) -> object:
    """The ApiVersions answer of this broker's registry and metadata image, as a kio entity."""
    version = ctx.api_version
    api_version_cls = nested_type(response_cls, "ApiVersion")
    api_keys = tuple(
        api_version_cls(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in advertised_versions(ctx.registry, ctx.state.image.features).items()
    )
    features: dict[str, object] = {}
    if version >= 3:
        image = ctx.state.image
        finalized = dict(image.features)
        if kraft_version is not None:  # KRaftMetadataCache.features: the quorum's kraft.version too
            finalized[KRAFT_VERSION] = kraft_version
        features = feature_fields(response_cls, finalized, image.offset, alter_v0=version < 4)
    return build(
        response_cls, error_code=ErrorCode.none, api_keys=api_keys, throttle_time=_NO_THROTTLE, **features
    )


def feature_fields(
    response_cls: type, finalized: Mapping[str, int], epoch: int, *, alter_v0: bool
) -> dict[str, object]:
    """SupportedFeatures, FinalizedFeatures and FinalizedFeaturesEpoch of an ApiVersions response."""
    supported_cls = nested_type(response_cls, "SupportedFeatureKey")
    finalized_cls = nested_type(response_cls, "FinalizedFeatureKey")
    return {
        "supported_features": tuple(
            supported_cls(name=name, min_version=low, max_version=high)
            for name, low, high in (*supported_features(), (KRAFT_VERSION, KRAFT_VERSION_0, KRAFT_VERSION_1))
            if not (alter_v0 and low == 0)
        ),
        "finalized_features": tuple(
            finalized_cls(name=name, min_version_level=level, max_version_level=level)
            for name, level in sorted(finalized.items())
            if level != 0
        ),
        "finalized_features_epoch": epoch,
    }


def advertised_versions(
    registry: ApiRegistry, features: Mapping[str, int] | None = None
) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) as ApiVersions answers it: what each handler takes, Produce from v0, the
    transaction-version-2 versions only when `features` (the finalized levels) have it."""
    advertised = {spec.api_key: (spec.min_version, spec.max_version) for spec in registry}
    if PRODUCE in advertised:
        advertised[PRODUCE] = (PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION, advertised[PRODUCE][1])
    if not supports_epoch_bump(transaction_version_level(features or {})):
        for key, first in TRANSACTIONS_V2_FIRST_VERSIONS.items():
            if key in advertised:
                low, high = advertised[key]
                advertised[key] = (low, min(high, first - 1))
    return advertised


def unsupported_version_response(registry: ApiRegistry) -> object:
    """The v0-shaped answer to an ApiVersions version we do not handle (header v0 as always)."""
    from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse

    spec = registry.get(API_KEY)
    assert spec is not None
    entry = ApiVersion(api_key=API_KEY, min_version=spec.min_version, max_version=spec.max_version)
    return ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=(entry,))


APIS = [ApiSpec(API_KEY, 0, kio_versions(API_KEY)[1], handle_api_versions)]  # type: ignore[index]
