"""The bundled default pair, derived drafts, GGUF metadata and llama.cpp's vocabulary rules."""
