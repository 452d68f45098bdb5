"""loglake.core."""
