"""Operations that re-derive tables from the log: rebuild and replay, asked for and checked here
before a Spark job runs them."""
