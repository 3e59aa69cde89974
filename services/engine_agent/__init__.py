"""Engine agent: one per engine; wraps one backend (sim, vllm, openai, sglang) behind one interface."""
