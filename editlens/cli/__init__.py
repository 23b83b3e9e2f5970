"""The ``editlens`` command line."""
