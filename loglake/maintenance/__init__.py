"""Which datasets maintenance covers, and how a run is shown."""
