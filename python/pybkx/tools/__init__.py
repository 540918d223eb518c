"""Operator and developer tools built on the client and the bookie: the local sandbox cluster,
the shell's admin commands and the demos. They orchestrate; the core does the work."""
