"""What loglake has recorded of the lake: the offsets ledger (batch watermarks and serving
points, ``ranges``), accepted losses (``losses``), consistent snapshots of a dataset's tables
(``snapshots``), each table's history and the commits loglake did not make (``history``), and
the record tables (quality, audit, maintenance: ``results``)."""
