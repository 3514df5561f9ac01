"""``python -m opslake_local.cli``: the same as the ``opslake`` command."""

import sys

from opslake_local.cli.parser import main

sys.exit(main())
