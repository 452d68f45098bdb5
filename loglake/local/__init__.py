"""loglake.local."""
