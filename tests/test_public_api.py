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
    "BackendCapabilities", "BackendClass", "BackendMessage", "BackendOptions", "BackendSettings", "BaseBackend",
    "CodingBackend", "Denial", "MessageType", "ModifiedFiles", "Refusal", "SessionSpec", "ToolReply", "TurnReport",
}


def test_the_contract_carries_the_turn_outcome_and_the_session_asks_nothing_else():
    # One object per turn (TurnReport), no per-turn getters in the protocol; the session and the
    # facade never reach past the contract with getattr.
    import ast
    from pathlib import Path

    protocol = agenter.backends.base.CodingBackend
    assert "last_turn" in dir(protocol) and "permit" in dir(protocol)
    for old in ("modified_files", "structured_output", "refusal", "unfinished_tools"):
        assert old not in protocol.__dict__, old
    root = Path(agenter.__file__).parent
    for folder in ("session", "facade"):
        for path in (root / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and node.args:
                    target = ast.unparse(node.args[0])
                    assert "backend" not in target, f"{path.name}:{node.lineno} getattr({target}, ...)"


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
