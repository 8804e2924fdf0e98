"""kio response classes with one field made nullable where Kafka sends -1 and kio cannot read it.

kio types DescribeTransactions' TransactionStartTimeMs as a non-negative datetime, but Kafka sends
-1 for an id with no open transaction (Empty, and after InitProducerId). kio's reader turns -1 into
None only for a field annotated `... | None`, so these classes are kio's own, field for field, with
that one annotation changed: the broker can answer -1 like Kafka (None encodes as -1) and kcli's
client can read Kafka's answer. `kcli.broker.apis.response_type` hands them out in kio's place.
"""

import dataclasses

from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.static.primitive import TZAware

_CLASS_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


def _retyped(kio_class: type, annotations: dict[str, object]) -> type:
    """A copy of the kio dataclass `kio_class` with the given fields' annotations replaced."""
    fields = []
    for f in dataclasses.fields(kio_class):
        if f.default is not dataclasses.MISSING:
            spec = dataclasses.field(metadata=f.metadata, default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(metadata=f.metadata, default_factory=f.default_factory)
        else:
            spec = dataclasses.field(metadata=f.metadata)
        fields.append((f.name, annotations.get(f.name, f.type), spec))
    namespace = {name: getattr(kio_class, name) for name in _CLASS_VARS}
    namespace["__module__"] = __name__
    namespace["__doc__"] = f"kio's {kio_class.__name__} with nullable {', '.join(annotations)}."
    return dataclasses.make_dataclass(
        kio_class.__name__, fields, namespace=namespace, frozen=True, slots=True, kw_only=True
    )


TopicData = describe_transactions_v0.TopicData
TransactionState = _retyped(
    describe_transactions_v0.TransactionState, {"transaction_start_time": TZAware | None}
)
DescribeTransactionsResponse = _retyped(
    describe_transactions_v0.DescribeTransactionsResponse,
    {"transaction_states": tuple[TransactionState, ...]},
)

RESPONSES: dict[tuple[int, int], type] = {(65, 0): DescribeTransactionsResponse}
"""(api key, version) -> the class to use instead of kio's."""
