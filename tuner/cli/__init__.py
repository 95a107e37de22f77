"""The `tuner` command line: the only layer that knows about terminals."""
