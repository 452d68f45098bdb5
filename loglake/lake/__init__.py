"""The lake written with Spark: Delta writes and their commit protocol, the system tables'
appends, a table's schema evolved to its dataset's."""
