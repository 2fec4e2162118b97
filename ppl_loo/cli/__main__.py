"""``python -m ppl_loo.cli``: the ``ppl-loo`` command."""

import sys

from ppl_loo.cli import main

sys.exit(main())
