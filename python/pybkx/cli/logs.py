"""The log line format of pybkx's commands (level, time, logger), shared by every entry point."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
