"""Engine agent: one per engine; one backend (sim, vllm, openai, sglang) behind one interface."""
