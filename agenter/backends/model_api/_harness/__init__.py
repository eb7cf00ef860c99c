"""agenter's own agent, model-neutral: the tool loop and what it runs (the model API family's own
package; its members anthropic_sdk/, openai_compat/ and litellm/ may import it).

- `loop.py`: `HarnessBackend`, the tool loop (cut-off nudges, compaction, the structured-output
  nudge, tool dispatch, the permission gate's wiring) over a wire;
- `wire.py`: the wire protocol, what a provider module writes (request building, streaming,
  usage, failure mapping);
- `conversation.py`: the conversation's rules (every tool_use answered once, compaction);
- `files.py`, `shell.py`, `builtin.py`: the file tools, the bash tool and the built-in tools'
  specs and executor.

Nothing here imports a provider's SDK.
"""
