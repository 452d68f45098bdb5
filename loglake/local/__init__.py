"""The platform on one machine: the embedded broker, Airflow standalone, the local cluster, the
jars and class-data archive, sample events, the demo and ``loglake up|down``."""
