"""llama-server's chat layer for any chat template.

Owns: ``inputs`` (``ChatInputs``, the one input value of the chat layer: llama.cpp's
``common_chat_templates_inputs``, every field checked once), ``template`` (messages read as llama.cpp reads them,
the template's capabilities, the prompt, the chat parser and stream), ``jinja`` (the Jinja port), ``analysis`` and
``analysis_tools`` (the differential analysis of a template: reasoning, content and tool-call markers),
``peg``/``_peg``/``peg_builder`` (the PEG arena, its executor and builder), ``chat_peg`` (the chat parser builder
and the common mapper), ``families/`` (one module per model family with a hand-written handler: its detection,
message rewrites, handler and mapper), ``constraint`` (a request's constraint: JSON mode, schemas, grammars),
``content`` (the JSON content rule), ``templates`` (templates known by name) and ``cache`` (what ``apply`` derives
from a template, its tools and options, kept by content).

Must not import: ``serve`` or ``integrations``. It builds on ``schema``, ``sampling`` (none today) and
``engine``.
"""

from bankml.chat.inputs import ChatInputs

__all__ = ["ChatInputs"]
