"""Kafka as loglake talks to it (confluent-kafka): topics, log bounds, consumer-group positions,
record reads; the embedded broker's TLS and SCRAM."""
