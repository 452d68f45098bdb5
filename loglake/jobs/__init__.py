"""loglake.jobs.protocol."""
