"""``python -m equiv``."""

import sys

from equiv.cli.main import main

sys.exit(main())
