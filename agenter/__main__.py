"""`python -m agenter`: the `agenter` command (see agenter/cli.py and docs/cli.md)."""

from agenter.cli import main

raise SystemExit(main())
