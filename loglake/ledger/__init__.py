"""loglake.ledger.ranges."""
