"""Operator and developer tools built on the client and the bookie: the local sandbox cluster,
the shell's admin commands and the demos. They orchestrate; they never parse arguments
(``pybkx.cli`` does), and the core does the work."""
