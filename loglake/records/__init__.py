"""Kafka records into rows, in Spark: exact offset ranges read, values decoded (JSON or a
registry format), validated against the dataset's schema, each refused one with its reason."""
