"""The quality gate: a written range validated by its expectations and published (the
quality job); write then publish in one process."""
