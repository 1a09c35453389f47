"""The worker contract: what a vllm-omni Higgs-Audio worker is, as the gateway, the emulator
and the simulator all read it.

- ``profile``: a deploy profile (the YAML vllm-omni ships), parsed into the stages' limits;
- ``timing``: the timing model those limits imply (the emulator's, the routing prior's);
- ``sentences``: how the worker splits a session's text into sentences;
- ``session_protocol``: the worker's ``/v1/audio/speech/stream`` messages;
- ``prompt_bound``: how long a prompt the worker's Stage 0 takes, in tokens.

Nothing here imports the gateway's serving code: it sits under everything but the vocabulary.
"""
