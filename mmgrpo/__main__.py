"""``python -m mmgrpo ...``: the CLI, as launchers run it (``torchrun -m mmgrpo train ...``)."""

import sys

from mmgrpo.cli import main

sys.exit(main())
