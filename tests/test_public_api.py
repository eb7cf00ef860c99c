"""The public surface, pinned: a change here is a change for every user."""

from __future__ import annotations

import agenter
import agenter.backends
import agenter.backends.base

AGENTER_ALL = {
    "AgentSession", "AgenterError", "AutonomousCodingAgent", "BackendError", "Budget", "BudgetExceededError",
    "CodingEvent", "CodingEventType", "CodingRequest", "CodingResult", "CodingRun", "CodingSession", "CodingStatus",
    "CommandValidator", "ConfigurationError", "PathSecurityError", "RequirementError",
    "SecurityValidator", "SyntaxValidator", "Tool", "ValidationResult", "Validator", "ValidatorChain",
    "Usage", "__version__", "configure_logging", "tool",
}

BACKEND_CONTRACT = {
    "BackendCapabilities", "BackendMessage", "BackendOptions", "BackendSettings", "BaseBackend",
    "CodingBackend", "Denial", "MessageType", "ModifiedFiles", "Refusal", "SessionSpec", "ToolReply",
}


def test_agenter_all_is_pinned():
    assert set(agenter.__all__) == AGENTER_ALL
    for name in agenter.__all__:
        assert getattr(agenter, name) is not None


def test_backend_contract_is_pinned():
    assert set(agenter.backends.base.__all__) == BACKEND_CONTRACT
    assert BACKEND_CONTRACT <= set(agenter.backends.__all__)


def test_base_backend_methods_a_backend_implements():
    base = agenter.backends.base.BaseBackend
    for hook in ("_connect", "_turn", "_disconnect", "requirements", "validate_settings"):
        assert hasattr(base, hook)
    for service in ("instructions", "refuse", "refuse_from_text", "accept_output", "parse_output",
                    "run_tool", "in_thread", "track", "relative", "changes_so_far"):
        assert callable(getattr(base, service))
