"""``python -m gpstudy``: the ``gpstudy`` command."""

from gpstudy.cli import main

main()
