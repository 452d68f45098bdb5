"""loglake.ops."""
