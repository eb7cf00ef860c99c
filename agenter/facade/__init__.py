"""The facade layer: AutonomousCodingAgent."""

from agenter.facade.agent import AutonomousCodingAgent

__all__ = ["AutonomousCodingAgent"]
