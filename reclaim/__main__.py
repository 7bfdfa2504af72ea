"""``python -m reclaim``: the ``reclaim`` command."""

import sys

from reclaim.cli.main import main

sys.exit(main())
