"""ClientQuotaControlManager: client quotas altered with AlterClientQuotas (KIP-546).

Each entity is checked on its own with Kafka's INVALID_REQUEST sentences (entity types, their
combination, the keys each kind takes, positive and in-range values); an entity that passes becomes
one ClientQuotaRecord per key whose value changes (a removal of a key not set writes nothing). All
entities that pass are written as one batch; a validate-only request writes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import NONE, ApiError, ControllerResult, Record
from kcli.broker.metadata.image import ClusterMetadataImage
from kcli.quota_config import (
    ENTITY_TYPES,
    QuotaEntity,
    describe_entity,
    quota_entity,
    valid_keys,
    value_error,
)


@dataclass(frozen=True, slots=True)
class EntityResult:
    """One entity's answer in AlterClientQuotasResponse, its (type, name) pairs as the request gave them."""

    entity: tuple[tuple[str, str | None], ...]
    error: ApiError = NONE


class ClientQuotaControlManager:
    """Checks AlterClientQuotas against the image and turns it into ClientQuotaRecords."""

    def alter_client_quotas(
        self, image: ClusterMetadataImage, entries: list[Any]
    ) -> ControllerResult[list[EntityResult]]:
        """Kafka's alterClientQuotas: `entries` are kio EntryData (entity pairs, ops of key/value/remove)."""
        records: list[Record] = []
        results: dict[QuotaEntity, EntityResult] = {}
        for entry in entries:
            given = tuple((e.entity_type, e.entity_name) for e in entry.entity)
            key = quota_entity(given)
            alterations: dict[str, float | None] = {}
            error = NONE
            for op in entry.ops:
                if op.key in alterations:
                    error = _invalid(
                        f"Duplicate quota key {op.key} not updating quota for this entity {describe_entity(key)}"
                    )
                else:
                    alterations[op.key] = None if op.remove else float(op.value)
            if key in results:
                results[key] = EntityResult(
                    given, _invalid(f"Ignoring duplicate entity {describe_entity(key)}")
                )
                continue
            if error.is_failure:
                results[key] = EntityResult(given, error)
                continue
            error = self._alter_entity(image, given, key, alterations, records)
            results[key] = EntityResult(given, error)
        return ControllerResult(records, list(results.values()))

    @staticmethod
    def _alter_entity(
        image: ClusterMetadataImage,
        given: tuple[tuple[str, str | None], ...],
        key: QuotaEntity,
        alterations: dict[str, float | None],
        out: list[Record],
    ) -> ApiError:
        if not given:
            return _invalid("Invalid empty client quota entity")
        entity: dict[str, str | None] = {}
        for kind, name in given:
            if kind in entity:
                return _invalid(f"Invalid client quota entity, duplicate entity entry {kind}")
            if kind not in ENTITY_TYPES:
                return _invalid(f"Unhandled client quota entity type: {kind}")
            entity[kind] = name
            if name is not None and not name:
                return _invalid(f"Empty {kind} not supported")
        keys = valid_keys(entity)
        if isinstance(keys, str):
            return _invalid(keys)
        current = image.client_quotas.get(key, {})
        entity_data = [{"entityType": kind, "entityName": name} for kind, name in key]
        records: list[Record] = []
        for name, value in alterations.items():
            if value is None:
                if name in current:
                    records.append(
                        (
                            "ClientQuotaRecord",
                            0,
                            {"entity": entity_data, "key": name, "value": 0.0, "remove": True},
                        )
                    )
                continue
            problem = value_error(keys, name, value)
            if problem is not None:
                return _invalid(problem)
            if current.get(name) != value:
                records.append(
                    (
                        "ClientQuotaRecord",
                        0,
                        {"entity": entity_data, "key": name, "value": value, "remove": False},
                    )
                )
        out.extend(records)
        return NONE


def _invalid(message: str) -> ApiError:
    return ApiError(ErrorCode.invalid_request, message)
