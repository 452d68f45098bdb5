"""loglake: Kafka is the truth; Delta tables are views of it."""

__version__ = "0.1.0"
