"""`make soak`: the fault scenarios of tests/reliability at full scale, with figures."""
