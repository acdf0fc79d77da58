"""``python -m jobengine``: the same as the ``jobengine`` command."""

import sys

from jobengine.cli.main import main

sys.exit(main())
