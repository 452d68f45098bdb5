"""GDPR erasure: a data subject's records found, deleted from every table, and purged from older versions."""
