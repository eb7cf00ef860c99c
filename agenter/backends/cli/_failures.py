"""What kind of failure an agent program reported, from its own words: the shared classifier
(agenter.backends._failures), kept importable here for the CLI backends' modules."""

from __future__ import annotations

from agenter.backends._failures import classify, status_in

__all__ = ["classify", "status_in"]
