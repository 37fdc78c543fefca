"""bankml inside other runtimes. Owns the integrations: logits processors for llama-cpp-python and transformers, and llama.cpp-exact
grammar masks under the serving engines vLLM and SGLang.

* ``bankml.integrations.adapters``: llama-cpp-python and transformers logits processors, and vocabularies read
  from their tokenizers.
* ``bankml.integrations.vllm``: a vLLM V1 logits processor (``BankmlLogitsProcessor``, per-request grammars from
  ``SamplingParams.extra_args``) and ``StructuredOutputBackend`` / ``StructuredOutputGrammar`` subclasses.
* ``bankml.integrations.sglang``: an SGLang grammar backend registered as ``"bankml"``.
* ``bankml.integrations.spec``: what both share — a request's constraint (GBNF, JSON schema, JSON mode, regex)
  compiled once per (kind, text) into Rules, and matchers cloned from it.

The engine modules import their engine lazily: importing ``bankml.integrations`` needs neither.

Must not import: ``serve`` or ``bankml.cli``. Builds on ``chat`` (none today), ``schema``, ``sampling`` and
``engine``.
"""
