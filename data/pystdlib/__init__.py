"""The embedded dataset: the Python standard library's source as byte tokens."""
