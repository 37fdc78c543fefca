"""Oracle helpers: drivers over the pinned llama.cpp (llama-cpp-python 0.3.36) for bankml's tests."""
