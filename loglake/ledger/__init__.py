"""What loglake has recorded of the lake: the offsets ledger (batch watermarks), accepted losses,
writer and stream leases, consistent snapshots, schema versions, batch planning, delta-rs reads
of the tables, their history, and the record tables (quality, audit, maintenance)."""
