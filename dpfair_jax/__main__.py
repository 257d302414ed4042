"""``python -m dpfair_jax``: the ``dpfair`` command line (see :mod:`dpfair_jax.cli`)."""

import sys

from dpfair_jax.cli import main

sys.exit(main())
