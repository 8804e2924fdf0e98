"""Replication: the partitions this broker hosts, between request handlers and the logs.

`Partition` (leader epoch, ISR, high watermark, the acks and read bounds), `ReplicaManager` (the hosted
partitions, appends and reads for handlers and coordinators), `Purgatory` (requests waiting on partitions).
"""
