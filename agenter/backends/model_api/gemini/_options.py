"""Options of the gemini backend (keyword arguments of AutonomousCodingAgent)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from agenter.backends.base import BackendOptions

DEFAULT_MODEL = "gemini-2.5-pro"


class GeminiOptions(BackendOptions):
    """How the gemini backend talks to the Gemini API (or Vertex AI) and runs its tool loop.

    api_key defaults to GOOGLE_API_KEY, then GEMINI_API_KEY (the google-genai SDK's order);
    base_url to GOOGLE_GEMINI_BASE_URL or the public API."""

    # Shared with other backends (one name everywhere).
    api_key: SecretStr | None = Field(
        None, description="Gemini API key; defaults to GOOGLE_API_KEY, then GEMINI_API_KEY. With gemini_vertex=True "
                          "a key means Vertex AI express mode.")
    base_url: str | None = Field(
        None, description="API base URL (a proxy, a gateway, the scripted server); defaults to GOOGLE_GEMINI_BASE_URL "
                          "or the public API.")
    max_retries: int = Field(4, ge=0, le=20, description="Retries per request on 408/409/429/5xx/dropped streams.")
    max_retry_wait: float = Field(60.0, ge=0, description="Cap in seconds on one retry wait (retry-after included).")
    request_timeout: float = Field(600.0, gt=0, description="Seconds per HTTP request (and between stream chunks).")
    # Model settings other model backends have too.
    max_tokens: int = Field(
        32768, gt=0, description="Output token limit per model response (max_output_tokens; thinking tokens count "
                                 "toward it on Gemini 2.5 and 3).")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Sampling temperature; None: the model's.")
    thinking: Literal["adaptive", "disabled"] | int | None = Field(
        None, description=(
            "None: the model's default. 'adaptive': the model decides how much to think (thinking_budget -1); "
            "'disabled': no thinking (budget 0; Gemini 2.5 Pro and Gemini 3 cannot turn it off); an int: a "
            "thinking budget in tokens (Gemini 2.5)."))
    effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        None, description="Gemini 3's thinking_level; None: the model's default. Not together with a thinking budget.")
    # Only this backend's.
    gemini_include_thoughts: bool = Field(
        True, description="Ask for thought summaries (reported as thinking). Turn off for a model without thinking.")
    gemini_vertex: bool = Field(
        False, description="Call Gemini on Vertex AI: with an API key in express mode, else with Application Default "
                           "Credentials and gemini_project/gemini_location.")
    gemini_project: str | None = Field(None, description="Vertex AI project; defaults to GOOGLE_CLOUD_PROJECT.")
    gemini_location: str | None = Field(None, description="Vertex AI location; defaults to GOOGLE_CLOUD_LOCATION.")
    gemini_max_turns_per_iteration: int = Field(
        50, gt=0, description="Model responses per execute() call before the tool loop stops.")
    gemini_shell: bool = Field(
        True, description="Give the model the bash tool (confined with sandbox=True: see gemini_shell_sandbox).")
    gemini_shell_sandbox: Literal["auto", "landlock", "bubblewrap", "seatbelt"] = Field(
        "auto", description=(
            "How the bash tool is confined with sandbox=True: 'auto' takes Landlock (Linux 6.2+), else bubblewrap "
            "(Linux), else Seatbelt (macOS); naming one forces it (a RequirementError when it is not there)."))
    gemini_shell_timeout: float = Field(
        120.0, gt=0, le=3600, description="Seconds a bash command may run unless the model asks for another limit.")

    @model_validator(mode="after")
    def _check_thinking(self) -> GeminiOptions:
        if isinstance(self.thinking, int) and self.thinking < 0:
            raise ValueError("a thinking budget must be 0 or more tokens ('adaptive' lets the model decide)")
        if self.thinking is not None and self.effort is not None:
            raise ValueError("thinking (a budget) and effort (a thinking level) cannot both be set: the API takes one")
        return self
