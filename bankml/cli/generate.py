"""``bankml generate``: one prompt answered on a real model, constrained as llama-server constrains a request
(JSON mode, a JSON schema, a GBNF grammar, tools), printed whole or as it grows, with the run's figures on stderr.

Owns this command's flags and its steps: the generation the flags ask for (read and checked before the model is
loaded), the model, the job (a chat, or a raw completion), the answer printed. The generation itself is
``bankml.serve.runtime.Model``'s. Must not import: ``bankml.cli``'s other command modules.
"""

import argparse
import json
import sys
from typing import NamedTuple

from bankml.chat.chat_peg import ChatParseError
from bankml.chat.constraint import Constraint, RequestError
from bankml.chat.inputs import ChatInputs
from bankml.chat.params import TOOL_CHOICES
from bankml.cli.files import load_json, read_text
from bankml.cli.options import add_chat_arguments, add_model_arguments
from bankml.errors import GrammarError, SchemaError
from bankml.sampling.params import SamplerParams
from bankml.serve.contexts import ModelError
from bankml.serve.flags import chat_model_options, context_options, model_load_options
from bankml.serve.request import Request
from bankml.serve.runtime import Model


def add_parser(sub):
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
    add_model_arguments(generate)
    add_chat_arguments(generate)
    _add_sampling_arguments(generate)
    generate.set_defaults(run=cmd_generate)


def _add_sampling_arguments(p):
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


class _Generation(NamedTuple):
    """The generation the flags ask for, read and checked before the model is loaded."""

    constraint: Constraint
    tools: list | None  # OpenAI's tools array (--tools)
    options: dict  # the Model's chat and context options
    params: SamplerParams


def cmd_generate(args):
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        print("error: give a prompt (argument or stdin)", file=sys.stderr)
        return 2
    try:
        asked = _read_flags(args)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        model = Model(args.model, **model_load_options(args), **asked.options)
    except (ModelError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        job = _start(model, prompt, asked, args)
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
    return _print_answer(job, args)


def _read_flags(args):
    """The _Generation of the flags; OSError or ValueError for a file that cannot be read or a flag that cannot
    be served."""
    constraint = _constraint(args)
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
    return _Generation(constraint, tools, options, params)


def _constraint(args):
    """The request's Constraint of --schema, --grammar or --json (none without them)."""
    if args.schema:
        return Constraint("json_schema", load_json(args.schema), None, True, "schema")
    if args.grammar:
        return Constraint("gbnf", None, read_text(args.grammar), True, "grammar")
    if args.json:
        return Constraint("json_object", {"type": "object"}, None, True, "json")
    return Constraint()


def _load_tools(path):
    """An OpenAI ``tools`` array from a JSON file (a lone tool object is taken as a one-tool array)."""
    tools = load_json(path)
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not tools:
        raise ValueError(
            f"{path}: --tools needs a JSON array of tools "
            '([{"type": "function", "function": {"name": ..., "parameters": {...}}}])'
        )
    return tools


def _start(model, prompt, asked, args):
    """The Job of the prompt: a raw completion with --raw, else a one-message chat with the tools offered."""
    if args.raw:
        if asked.tools is not None:
            raise ValueError("--tools needs the chat template: it cannot be used with --raw")
        return model.complete(prompt, asked.constraint, asked.params, args.n_predict, args.stop)
    inputs = ChatInputs([{"role": "user", "content": prompt}])
    if asked.tools is not None:
        choice = args.tool_choice
        if choice not in TOOL_CHOICES:  # a function's name: OpenAI's named tool_choice
            choice = {"type": "function", "function": {"name": choice}}
        inputs = inputs.replace(tools=asked.tools, tool_choice=choice, parallel_tool_calls=args.parallel_tool_calls)
    return model.chat(Request.for_chat(inputs, asked.constraint, asked.params, args.n_predict, args.stop))


def _print_answer(job, args):
    """Run the job: its content on stdout (as it grows with --stream), then each tool call, then the run's
    figures on stderr; 1 when the answer does not match the template's format."""
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
    _print_tool_calls(result, out)
    out.flush()
    _print_figures(result)
    return 0


def _print_tool_calls(result, out):
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


def _print_figures(result):
    """The run's figures on stderr: tokens, speed, the prompt, the grammar and sampling's share of a step."""
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
