"""agenter's own agent, model-neutral: the tool loop and what it runs (the model API family's own
package; its members anthropic_sdk/, openai_compat/ and litellm/ may import it).

- `wire.py`: the wire protocol, what a provider module writes (request building, streaming,
  usage, failure mapping) and the neutral stream accumulation it may use;
- `loop.py`: `HarnessBackend`, the tool loop over a wire (cut-off nudges, the structured-output
  nudge, retries), and `LoopConfig`, what it reads of a backend's options;
- `dispatch.py`: tool dispatch (the executor, the permission gate's wiring, one result per call);
- `compaction.py`: the compaction step and its summary request;
- `conversation.py`: the conversation's rules (every tool_use answered once, compaction);
- `files.py`, `shell.py`, `builtin.py`: the file tools, the bash tool, the built-in tools' specs
  and executor; `prompts.py`: what the harness tells the model; `retry.py`: the retry policy.

Nothing here imports a provider's SDK. See agenter/backends/AGENTS.md, "The model API family".
"""
