"""loglake.kafka."""
