"""python -m automon.sandbox: see automon.sandbox.cli."""

import sys

from automon.sandbox.cli import main

sys.exit(main())
