"""The backend contract, proven the same way for every backend: each case (tests/backends/kit.py,
one per backend and agent program, listed in the `cases` module of its folder) × the
conformance suite (agenter.testing.conformance.CHECKS) and × the permission proofs
(PERMISSION_CHECKS), then the kit's shared proofs a case opts into (resume, the error classes,
the time budget, a 300 KB prompt, the missing program). Real agent programs run against the
scripted model server; a case whose program is not installed skips (fails on CI). A backend's
own behaviour is tested in its folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenter.testing import conformance

from .agents.acp import cases as acp
from .agents.claude_code import cases as claude_code
from .agents.codex import cases as codex
from .agents.google_adk import cases as google_adk
from .agents.openai_agents import cases as openai_agents
from .agents.openhands import cases as openhands
from .cli import cases as cli
from .kit import Case
from .model_api.anthropic_sdk import cases as anthropic_sdk
from .model_api.litellm import cases as litellm
from .model_api.openai_compat import cases as openai_compat

CASES = [*claude_code.CASES, *codex.CASES, *acp.CASES, *openhands.CASES, *openai_agents.CASES, *google_adk.CASES,
         *anthropic_sdk.CASES, *openai_compat.CASES, *litellm.CASES, *cli.CASES]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder kept for the module: a program's one-time set-up (OpenCode's database)."""
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(params=CASES)
def case(request: Any, shared: Path) -> Case:
    made: Case = request.param(shared)
    return made


@pytest.mark.parametrize("check", conformance.CHECKS, ids=conformance.check_id)
async def test_conformance(case: Case, check: Any, kit: Any, tmp_path: Path) -> None:
    if check.__name__ in case.skip_checks:
        pytest.skip("a slow program: this check's code path is all agenter's, proven on the faster ones")
    await check(kit.harness(), tmp_path)


@pytest.mark.parametrize("check", conformance.PERMISSION_CHECKS, ids=conformance.check_id)
async def test_permissions(case: Case, check: Any, kit: Any, tmp_path: Path) -> None:
    await check(kit.harness(), tmp_path)


async def test_resume(case: Case, kit: Any, tmp_path: Path) -> None:
    """A second turn continues the session, and a new backend resumes it by its id."""
    if case.resume is None:
        pytest.skip("not proven for this case")
    await kit.check_resume(tmp_path, **case.resume)


async def test_error_classes(case: Case, kit: Any, tmp_path: Path) -> None:
    """HTTP 401, 429 and 500 end in BackendErrors of kind auth, rate_limit, transient."""
    if not case.error_classes:
        pytest.skip("not proven for this case")
    await kit.check_error_classes(tmp_path)


async def test_time_budget_with_a_hung_model(case: Case, kit: Any, tmp_path: Path) -> None:
    if case.time_budget is None:
        pytest.skip("not proven for this case")
    await kit.check_time_budget(tmp_path, **case.time_budget)


async def test_a_300_kb_prompt(case: Case, kit: Any, tmp_path: Path) -> None:
    if not case.big_prompt:
        pytest.skip("not proven for this case (its resume test sends one)")
    await kit.check_big_prompt(tmp_path)


def test_a_missing_program_names_its_install_command(case: Case, kit: Any) -> None:
    if case.install is None:
        pytest.skip("not proven for this case")
    kit.check_missing_program(case.install)
