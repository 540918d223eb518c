"""``python -m pybkx``: the ``pybkx`` command, for when the console script is not on PATH.
It only hands over to the CLI; it must never hold logic of its own."""

from pybkx.cli import main

if __name__ == "__main__":
    main()
