"""``python -m gpstudy``: the ``gpstudy`` command."""

from gpstudy.cli import main

if __name__ == "__main__":  # imported, as tests/study/test_defaults.py imports every module, it runs nothing
    main()
