"""The runtime layer: the iteration loop and budget enforcement."""

from agenter.session.budget import BudgetTracker
from agenter.session.loop import CodingSession

__all__ = ["BudgetTracker", "CodingSession"]
