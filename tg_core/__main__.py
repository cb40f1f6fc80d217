"""`python -m tg_core` is the `tg` command."""
import sys

from tg_core.cli import main

sys.exit(main())
