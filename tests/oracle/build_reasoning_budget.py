"""Test support: a small program over the pinned llama.cpp's reasoning budget sampler
(``common_reasoning_budget_init`` of ``common/reasoning-budget.cpp``, exported by ``libllama-common.so`` of
llama-cpp-python 0.3.36), and a driver that talks to it.

Like ``build_chat.py`` (whose header tree it reuses), it compiles at test time, outside the repository, into
``$BANKML_ORACLE_CACHE``. The program loads a vocabulary vocab-only (the sampler reads pieces for its UTF-8
check), then reads one command per line and answers one line per command:

* ``I budget initial_state start_seqs end_seqs forced`` -- a new sampler; sequences as ``1,2,3``, lists of them
  joined by ``;`` (``-`` for none); initial_state 0..4 (IDLE, COUNTING, FORCING, WAITING_UTF8, DONE);
* ``A token`` -- ``llama_sampler_accept``;  ``F`` -- ``common_reasoning_budget_force``;  ``R`` --
  ``llama_sampler_reset``;  ``C`` -- ``llama_sampler_clone`` (the clone replaces the sampler);

each answered with ``state forced end_match``: the state number, the one token ``llama_sampler_apply`` leaves
above -inf over the whole vocabulary (-1 when it leaves them all, -2 when none), and the end match (``1,2`` or
``-``).
"""

import subprocess

from .build_chat import _vendor
from .build_converter import cache_dir, compile_program, libllama_dir

PROGRAM = r"""
// bankml test support: llama.cpp's reasoning budget sampler, driven one command per line.
#include "reasoning-budget.h"
#include "llama.h"
#include <cmath>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static llama_tokens parse_seq(const std::string & s) {
    llama_tokens out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) if (!item.empty()) out.push_back(std::stoi(item));
    return out;
}
static std::vector<llama_tokens> parse_seqs(const std::string & s) {
    std::vector<llama_tokens> out;
    if (s == "-") return out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ';')) out.push_back(parse_seq(item));
    return out;
}

int main(int argc, char ** argv) {
    llama_backend_init();
    auto mparams = llama_model_default_params();
    mparams.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mparams);
    if (!model) { std::cerr << "cannot load " << argv[1] << std::endl; return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token_data> cur(n_vocab);
    llama_sampler * smpl = nullptr;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::stringstream ss(line);
        std::string cmd;
        ss >> cmd;
        if (cmd == "I") {
            int budget, state;
            std::string start, end, forced;
            ss >> budget >> state >> start >> end >> forced;
            if (smpl) llama_sampler_free(smpl);
            smpl = common_reasoning_budget_init(vocab, parse_seqs(start), parse_seqs(end),
                                                forced == "-" ? llama_tokens() : parse_seq(forced), budget,
                                                (common_reasoning_budget_state) state);
        } else if (cmd == "A") {
            int token;
            ss >> token;
            llama_sampler_accept(smpl, token);
        } else if (cmd == "F") {
            common_reasoning_budget_force(smpl);
        } else if (cmd == "R") {
            llama_sampler_reset(smpl);
        } else if (cmd == "C") {
            llama_sampler * other = llama_sampler_clone(smpl);
            llama_sampler_free(smpl);
            smpl = other;
        }
        for (int i = 0; i < n_vocab; i++) cur[i] = { i, 0.0f, 0.0f };
        llama_token_data_array arr = { cur.data(), (size_t) n_vocab, -1, false };
        llama_sampler_apply(smpl, &arr);
        int kept = 0, forced = -1;
        for (int i = 0; i < n_vocab; i++) if (cur[i].logit != -INFINITY) { kept++; forced = i; }
        if (kept == n_vocab) forced = -1; else if (kept == 0) forced = -2;
        const llama_tokens * match = common_reasoning_budget_get_end_match(smpl);
        std::string m = "-";
        if (match) { m.clear(); for (size_t i = 0; i < match->size(); i++) { if (i) m += ","; m += std::to_string((*match)[i]); } }
        std::cout << (int) common_reasoning_budget_get_state(smpl) << " " << forced << " " << m << std::endl;
    }
    if (smpl) llama_sampler_free(smpl);
    llama_model_free(model);
    return 0;
}
"""

STATES = ("idle", "counting", "forcing", "waiting_utf8", "done")


def build():
    lib = libllama_dir()
    vendor = _vendor(cache_dir())
    return compile_program(
        "reasoning-budget",
        PROGRAM,
        lib,
        [vendor / "common", vendor / "include", vendor / "ggml" / "include"],
        ["llama-common", "llama"],
        salt="rpath",
    )


class OracleReasoningBudget:
    """The program, kept running on one vocabulary; each call sends one command and returns
    (state name, forced token or None, end match tuple or None)."""

    def __init__(self, vocab_path, exe=None):
        self.proc = subprocess.Popen(
            [str(exe or build()), str(vocab_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def _send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if len(answer) != 3:
            raise RuntimeError(f"the reasoning budget program answered {answer!r} to {line!r}")
        state, forced, match = int(answer[0]), int(answer[1]), answer[2]
        return (
            STATES[state],
            None if forced == -1 else forced,
            None if match == "-" else tuple(int(t) for t in match.split(",")),
        )

    def init(self, budget, initial_state, start, end, forced):
        def seqs(values):
            return ";".join(",".join(map(str, s)) for s in values) if values else "-"

        return self._send(
            "I %d %d %s %s %s"
            % (
                budget,
                STATES.index(initial_state),
                seqs(start),
                seqs(end),
                ",".join(map(str, forced)) if forced else "-",
            )
        )

    def accept(self, token):
        return self._send("A %d" % token)

    def force(self):
        return self._send("F")

    def reset(self):
        return self._send("R")

    def clone(self):
        return self._send("C")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
