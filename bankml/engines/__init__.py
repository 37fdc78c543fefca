"""bankml inside serving engines: llama.cpp-exact grammar masks under vLLM and SGLang.

* ``bankml.engines.vllm``: a vLLM V1 logits processor (``BankmlLogitsProcessor``, per-request grammars from
  ``SamplingParams.extra_args``) and ``StructuredOutputBackend`` / ``StructuredOutputGrammar`` subclasses.
* ``bankml.engines.sglang``: an SGLang grammar backend registered as ``"bankml"``.
* ``bankml.engines.spec``: what both share — a request's constraint (GBNF, JSON schema, JSON mode, regex)
  compiled once per (kind, text) into Rules, and matchers cloned from it.

The engine modules import their engine lazily: importing ``bankml.engines`` needs neither.
"""
