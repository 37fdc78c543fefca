"""The sampler configurations the sampler benchmarks draw with (bench/test_sampler_bench.py beside libllama,
bench/ab_sampler.py between two builds): llama-server's sampling parameters over the Qwen2 vocabulary size."""

N_VOCAB = 151936
CONFIGS = {
    "server-defaults": {},
    "greedy": {"temperature": 0.0},
    "top-p-only": {"top_k": 0, "top_p": 0.9, "min_p": 0.0},
    "typical-xtc-penalties": {
        "typical_p": 0.9,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.1,
        "repeat_penalty": 1.1,
        "frequency_penalty": 0.2,
        "top_k": 0,
    },
    "dynatemp-top-n-sigma": {"dynatemp_range": 0.5, "top_n_sigma": 1.5, "top_k": 0},
    "mirostat-v2": {"mirostat": 2},
}
