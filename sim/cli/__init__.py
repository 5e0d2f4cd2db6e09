"""The ``trainsim`` command line."""
