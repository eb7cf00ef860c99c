"""`python -m agenter.planner "PROMPT" --cwd DIR ...`: the `agenter plan` command."""

import sys

from agenter.planner.cli import main

sys.exit(main())
