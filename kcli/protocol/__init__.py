"""The Kafka wire protocol, shared by the broker, the client and the operations.

`messages` (kio glue: classes by api key and version, `build`, error answers), `guard` (a request's
declared sizes and nullability checked before kio decodes it), `codec` (fast encoders checked against
kio), `produce_codec` (Produce requests framed and answers read without kio on the hot path),
`nullable_schemas` (answers where Kafka sends a null kio cannot read). Imports only kio and formats.
"""
