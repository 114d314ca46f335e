"""``python -m equiv``."""

import sys

from equiv.cli import main

sys.exit(main())
