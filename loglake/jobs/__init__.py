"""The one job runtime: the registry of Spark jobs, the request/summary protocol, spark-submit
command lines, the shared Spark application, Spark sessions and the supervisor that keeps a job alive."""
