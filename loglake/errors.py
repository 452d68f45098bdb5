"""The vocabulary of loglake's errors.

Each type carries what an operator needs to act: the file and key for configuration,
topic, partition and offsets for the log, the table for Delta. Messages say what was
expected, what was found and what to do.
"""

from __future__ import annotations


class LoglakeError(Exception):
    """Base of every error loglake raises on purpose."""


class SetupError(LoglakeError):
    """Something `make setup` provides is missing or could not be resolved."""


class ConfigError(LoglakeError):
    """A configuration file or value is invalid.

    ``file`` and ``key`` name where; the message says what was expected.
    """

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key
        where = ": ".join(p for p in (file, key) if p)
        super().__init__(f"{where}: {message}" if where else message)


class OffsetError(LoglakeError, ValueError):
    """An offset or offset range is malformed (negative, start > end, ...)."""

    def __init__(self, message: str, *, topic: str | None = None, partition: int | None = None):
        self.topic = topic
        self.partition = partition
        super().__init__(message)


class DataLossError(LoglakeError):
    """Offsets that must be read are no longer in the log. Never swallowed."""

    def __init__(self, topic: str, partition: int, missing_start: int, missing_end: int, detail: str = ""):
        self.topic = topic
        self.partition = partition
        self.missing_start = missing_start
        self.missing_end = missing_end
        msg = (
            f"data loss: {topic}[{partition}] offsets [{missing_start}, {missing_end}) "
            f"are no longer retained by Kafka"
        )
        super().__init__(f"{msg}; {detail}" if detail else msg)


class KafkaUnavailableError(LoglakeError):
    """The Kafka cluster could not be reached or did not answer in time."""


class ProcessError(LoglakeError):
    """A managed background process (broker, stream) failed to start or stop."""
