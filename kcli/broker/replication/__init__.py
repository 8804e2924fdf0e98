"""Replication: the partitions this broker hosts, between request handlers and the logs.

`Partition` (leader epoch, ISR, high watermark, the acks and read bounds), `ReplicaManager` (the hosted
partitions; Kafka's `append_records` and `fetch_messages`, the calls handlers and coordinators make),
`Purgatory` (requests waiting on partitions).
"""
