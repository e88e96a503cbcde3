"""``python -m threads.cli``: the ``threads`` command without an installed script."""

from __future__ import annotations

import sys

from threads.cli.main import main

sys.exit(main())
