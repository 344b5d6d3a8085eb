"""``python -m laketail.cli``: the same as the ``laketail`` command."""

from laketail.cli import main

main()
