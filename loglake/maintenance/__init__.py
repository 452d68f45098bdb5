"""loglake.maintenance.runs."""
