"""``-bs``/``--backend-sampling`` and the request field ``backend_sampling``: accepted, and bankml samples with the
CPU chain either way. The proof that this is llama-server's answer: the pinned llama-server started with ``-bs``
answers a request with llama-server's default sampler order identically with ``backend_sampling`` true and false
(its DRY sampler, second in that order, has no graph implementation, so the chain runs on the CPU but for the
penalties), and bankml answers it as llama-server does."""

from bankml import cli
from bankml.serve.app import defaults_from_args

from ..oracle_support import ORACLE_STATS
from .serve_support import smollm2_client
from .test_prompt_cache import _both

_BODY = {"prompt": "The countries of Europe, in random order, are:", "n_predict": 12, "seed": 4242, "temperature": 0.8}


def test_the_flag_and_the_field_are_accepted_and_reported():
    args = cli.build_parser().parse_args(["serve", "-bs"])
    assert args.backend_sampling is True
    assert cli.build_parser().parse_args(["serve"]).backend_sampling is False
    with smollm2_client(defaults=defaults_from_args(args)) as c:
        params = c.get("/props").json()["default_generation_settings"]["params"]
        assert params["backend_sampling"] is True
        on = c.post("/completion", json={**_BODY, "cache_prompt": False}).json()
        off = c.post("/completion", json={**_BODY, "backend_sampling": False, "cache_prompt": False}).json()
        assert on["content"] == off["content"] and on["content"]
        # the request's value (the server's by default) in its generation settings, as llama-server's task params
        assert on["generation_settings"]["backend_sampling"] is True
        assert off["generation_settings"]["backend_sampling"] is False


def test_llama_servers_backend_sampling_answers_as_its_cpu_chain_and_as_bankml():
    bodies = [
        # no probabilities (_both's default asks for 3): llama-server then samples in the graph
        {**_BODY, "n_probs": 0, "backend_sampling": True},
        {**_BODY, "n_probs": 0, "backend_sampling": False},
        {**_BODY, "n_probs": 3, "backend_sampling": True},
        {**_BODY, "n_probs": 3, "backend_sampling": False},
    ]
    theirs, ours = _both(bodies, ("-bs",))
    assert "completion_probabilities" not in theirs[0]
    for a, b in ((theirs[0], theirs[1]), (theirs[2], theirs[3])):
        assert a["content"] == b["content"]
        assert a.get("completion_probabilities") == b.get("completion_probabilities")
    for a, b in zip(theirs, ours, strict=True):
        assert b["content"] == a["content"]
        assert b.get("completion_probabilities") == a.get("completion_probabilities")
        ORACLE_STATS["llama-server backend-sampling answers identical (bankml serve, live)"] += 1
