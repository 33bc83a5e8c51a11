"""OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): vLLM, LM Studio,
llama.cpp, OpenRouter, Together, Groq and the like. Several instances may run side by side."""
