"""The bytes Kafka keeps on disk: sans-I/O codecs that take bytes or memoryviews and return values."""
