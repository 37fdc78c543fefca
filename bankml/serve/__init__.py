"""llama-server's HTTP surface and the model runtime behind it.

Owns: ``app`` (the Starlette app: OpenAI and Ollama routes, streaming), ``auth`` (llama-server's API keys),
``endpoints`` (``/tokenize``, ``/detokenize``, ``/apply-template``, ``/props``, ``/slots``, ``/metrics``),
``flags`` (llama-server's ``-fa``, ``-ctk``/``-ctv``, ``-c 0``, ``LLAMA_ARG_*``), ``fields`` (the request fields
and how each is treated), ``runtime`` (the model, its slots, the generation loop) and ``cpu`` / ``_cpu`` (the
CPU features that decide how a model is loaded).

Must not import: ``integrations`` or ``bankml.cli``. Starlette and uvicorn are imported only by ``app``
and ``endpoints`` (the server extra), llama-cpp-python only where a model is loaded (the model extra).
"""
