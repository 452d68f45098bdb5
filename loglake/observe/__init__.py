"""What loglake says about itself to monitoring systems (docs/observability.md).

``series``: the small time series the streams, the jobs and the exporter's sampler append to
under the state directory; ``snapshot``: ``loglake status --json``, read from the same
functions the metrics are; ``exporter``: the Prometheus exporter (``loglake up`` runs it) and
the metric names; ``lineage``: OpenLineage events of the batch-side jobs.
"""
