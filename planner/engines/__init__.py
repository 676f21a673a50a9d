"""The engines an instance can run (one module each) and the engine-agnostic process runner.

`base` holds the `Engine` protocol, its features and the registry looked up by a plan's
`engine.kind`; `process` starts, watches and stops any engine's server; `vllm` is vLLM.
"""
