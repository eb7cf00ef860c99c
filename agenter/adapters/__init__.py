"""Framework adapters (optional extras): agenter.adapters.langgraph, agenter.adapters.pydantic_ai."""
