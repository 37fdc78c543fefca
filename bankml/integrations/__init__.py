"""bankml inside other runtimes. Owns the integrations: logits processors for llama-cpp-python and transformers, and llama.cpp-exact
grammar masks under the serving engines vLLM and SGLang.

* ``bankml.integrations.adapters``: llama-cpp-python and transformers logits processors, and vocabularies read
  from their tokenizers.
* ``bankml.integrations.vllm``: a vLLM V1 logits processor (``BankmlLogitsProcessor``, per-request grammars from
  ``SamplingParams.extra_args``) and ``StructuredOutputBackend`` / ``StructuredOutputGrammar`` subclasses.
* ``bankml.integrations.sglang``: an SGLang grammar backend registered as ``"bankml"``.
* ``bankml.integrations.spec``: what both share — a request's constraint (GBNF, JSON schema, JSON mode, regex,
  structural tag) compiled once per (kind, text) into Rules, and matchers cloned from it.
* ``bankml.integrations.structural_tag``: XGrammar's structural tags (what the engines send for strict tool
  calls) to GBNF, on ``xgrammar_lang`` (XGrammar's TagDispatch automaton as GBNF), ``xgrammar_ebnf`` and
  ``xgrammar_regex`` (its EBNF and regex dialects).

The engine modules import their engine lazily: importing ``bankml.integrations`` needs neither.

Must not import: ``serve`` or ``bankml.cli``. Builds on ``chat`` (none today), ``schema`` (the strict compiler and
``tool_args`` for structural tags), ``sampling`` and ``engine``.
"""
