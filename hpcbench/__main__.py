"""``python -m hpcbench ARGS`` is the ``hpcbench`` command, for job scripts and launchers (torchrun,
srun) that run an interpreter rather than the venv's ``bin/hpcbench``."""

import sys

from hpcbench.cli import main

sys.exit(main())
