"""LLM inference: GGUF files (gguf.py, dequant.py), the tokenizer and chat templates, llama-family models with
a KV cache, sampling and generation, and the `tg llm` commands (docs/architecture.md, "LLM inference")."""
