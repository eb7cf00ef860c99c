"""The runtime layer: the per-request loop (CodingRun) and budget enforcement."""

from agenter.session.budget import BudgetTracker
from agenter.session.loop import CodingRun, CodingSession

__all__ = ["BudgetTracker", "CodingRun", "CodingSession"]
