"""``python -m ringccl`` runs the ``ringccl`` command."""

import sys

from .cli import main

sys.exit(main())
