"""`python -m streamplane.sim`: see the package's docstring."""

import sys

from streamplane.sim.runner import main

sys.exit(main())
