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


RESULT_FIELDS = {
    "status", "files", "summary", "iterations", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "total_tokens", "estimated_input_tokens", "estimated_output_tokens", "total_cost_usd",
    "duration_seconds", "output", "error",
    "exceeded_limit", "error_kind", "refusal_reason", "validation_errors", "validation", "diff", "attempts",
    "permission_denials", "backend", "model", "session_id", "pending", "resume_handle",
}


def test_result_fields_are_pinned():
    # What a run reports: every validator's verdict (`validation`, ValidationResult objects, the
    # class agenter.validators exports) beside the blocking problems (`validation_errors`).
    assert set(agenter.CodingResult.model_fields) == RESULT_FIELDS
    assert agenter.CodingResult.model_fields["validation"].annotation == list[agenter.ValidationResult]
    assert set(agenter.ValidationResult.model_fields) == {
        "validator", "passed", "errors", "blocking", "skipped", "details", "duration_seconds"}
    from agenter.validators import ValidationResult

    assert ValidationResult is agenter.ValidationResult


def test_exported_exceptions_are_shown_where_users_import_them():
    # A traceback says agenter.PathSecurityError, not the private agenter._errors (issue 25).
    import pickle

    for name in ("AgenterError", "ConfigurationError", "RequirementError", "BackendError",
                 "BudgetExceededError", "PathSecurityError"):
        cls = getattr(agenter, name)
        assert cls.__module__ == "agenter" and repr(cls) == f"<class 'agenter.{name}'>"
    error = agenter.PathSecurityError("Refused: '../x' resolves outside the working directory")
    assert type(pickle.loads(pickle.dumps(error))) is agenter.PathSecurityError


def test_repr_shows_the_model_that_runs():
    # No model= given: the backend's default is what runs, and what the repr says (issue 25).
    from agenter.backends.model_api.anthropic_sdk._options import DEFAULT_MODEL

    agent = agenter.AutonomousCodingAgent(backend="anthropic-sdk", api_key="sk-test-0123456789")
    assert repr(agent) == f"AutonomousCodingAgent(backend='anthropic-sdk', model={DEFAULT_MODEL!r})"
    chosen = agenter.AutonomousCodingAgent(backend="anthropic-sdk", api_key="sk-test-0123456789", model="m-1")
    assert repr(chosen) == "AutonomousCodingAgent(backend='anthropic-sdk', model='m-1')"
