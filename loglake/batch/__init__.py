"""The batch layer: exact offset ranges recomputed into the batch table (the batch job), and
the serving view compared with a full recompute."""
