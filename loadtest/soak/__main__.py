"""``python -m loadtest.soak``: the harness is :mod:`loadtest.soak.run`."""

import sys

from loadtest.soak.run import main

sys.exit(main())
