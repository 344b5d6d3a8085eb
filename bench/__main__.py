"""``python -m bench`` (``make bench``): install what is missing, then run the suite."""

import sys

from bench.bootstrap import SetupError, ensure_all


def _main() -> int:
    try:
        ensure_all()
    except SetupError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    from bench.cli import main

    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(_main())
