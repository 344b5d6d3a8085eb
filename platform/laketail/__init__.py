"""laketail: a streaming platform with Kafka's semantics whose topics are Delta Lake tables."""

__version__ = "0.1.0"
