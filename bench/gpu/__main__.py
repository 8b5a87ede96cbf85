"""``python -m bench.gpu`` (``make bench-gpu``): the runner is :mod:`bench.gpu.run`."""

import sys

from bench.gpu.run import main

sys.exit(main())
