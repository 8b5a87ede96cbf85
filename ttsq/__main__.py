"""``python -m ttsq``: the command line (:mod:`ttsq.client.cli`)."""

import sys

from ttsq.client.cli import main

sys.exit(main())
