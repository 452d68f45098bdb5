"""loglake.serving."""
