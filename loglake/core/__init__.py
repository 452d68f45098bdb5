"""The ground floor: configuration, the error vocabulary, offsets as values, the tables' contracts,
paths, processes, SQL predicates over provenance columns and retries. Imports no other package."""
