"""loglake.speed."""
