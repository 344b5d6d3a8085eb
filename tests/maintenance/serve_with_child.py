"""Test-only: ``laketail serve`` whose maintenance child is a shell command, not a JVM.

``python tests/maintenance/serve_with_child.py serve ...`` runs the real CLI in a real
process, with :meth:`MaintenanceScheduler.child_argv` replaced by ``sh -c
$LAKETAIL_TEST_MAINTENANCE_CHILD``: everything else -- how the scheduler starts,
supervises and stops its child -- is the product's.
"""

from __future__ import annotations

import os
import sys

from laketail.cli import main
from laketail.maintenance.scheduler import MaintenanceScheduler


def _shell_child(self: MaintenanceScheduler) -> list[str]:
    return ["sh", "-c", os.environ["LAKETAIL_TEST_MAINTENANCE_CHILD"]]


if __name__ == "__main__":
    MaintenanceScheduler.child_argv = _shell_child  # type: ignore[method-assign]
    main(sys.argv[1:])
