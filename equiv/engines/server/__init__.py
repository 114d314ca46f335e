"""The server engine: llama-server, OpenAI-compatible, vLLM and SGLang over HTTP."""
