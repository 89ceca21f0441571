"""python -m kbench"""

import sys

from kbench.cli import main

sys.exit(main())
