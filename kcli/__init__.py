"""kcli: an embedded Kafka-compatible broker and the tools a Kafka operator reaches for."""

__version__ = "0.1.0"
