"""llama-server's HTTP surface and the model runtime behind it: one request pipeline, run downward.

A body goes HTTP (``app``) -> request (``openai`` / ``ollama`` read it into ``request.Request``, every field
checked against ``fields``) -> runtime (``Model.prepare`` makes a Job of it) -> ``bankml.chat`` ->
``bankml.schema`` / ``bankml.engine``.

Owns: ``app`` (the Starlette app: routes, reading the body off the event loop, streaming and the answers' shape; no
field is read there), ``request`` (the typed ``Request``, ``ServerLimits``, the readings both wire formats share),
``openai`` and ``ollama`` (a body of each wire format to a Request), ``anthropic`` and ``responses`` (Anthropic's
Messages and OpenAI's Responses bodies converted into the chat body ``openai`` reads, and each format's answer and
stream writers), ``native`` (llama-server's ``/completion`` answer and stream), ``fields`` (every request field and
how it is treated: honoured, refused, or accepted with no bearing), ``auth`` (llama-server's API keys),
``endpoints`` (``/tokenize``, ``/detokenize``, ``/apply-template``, ``/props``, ``/slots``, ``/metrics``),
``embeddings`` (``/embeddings``, ``/v1/embeddings``, ``/rerank``: llama-server's embeddings and reranking),
``flags`` (llama-server's ``-fa``, ``-ctk``/``-ctv``, ``-c 0``, ``LLAMA_ARG_*``), ``runtime`` (the model, its slot
pool, its rules cache), ``model_chat`` (the Model's chat side, a mixin: its chat options, a chat Request's Job),
``job`` (the generation loop) and ``cpu`` / ``_cpu`` (the CPU features that decide how a model is loaded).

Within the package, imports point down the pipeline: ``app`` -> ``anthropic``, ``responses``, ``native``,
``openai``, ``ollama``, ``endpoints``, ``embeddings``, ``runtime``; ``embeddings`` -> ``plumbing``, ``contexts``;
``anthropic``, ``responses`` -> ``openai``, ``request``; ``native`` -> ``openai``, ``endpoints``; ``openai``,
``ollama`` -> ``fields``, ``request``; ``runtime`` -> ``model_chat`` -> ``job``, ``request`` (the type it
takes). ``request`` imports no other module of the package.

Must not import: ``integrations`` or ``bankml.cli``. Starlette and uvicorn are imported only by ``app``,
``endpoints`` and ``embeddings`` (the server extra), llama-cpp-python only where a model is loaded (the model extra).
"""
