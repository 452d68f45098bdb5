"""The speed layer from the outside: its streams as supervised background processes."""
