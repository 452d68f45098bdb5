"""The Spark side of loglake: speed, batch, quality and maintenance jobs and their shared code."""
