"""loglake.lifecycle."""
