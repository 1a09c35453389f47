"""Voice sessions: the worker's WebSocket ``/v1/audio/speech/stream``, served by the gateway.

A client written for the vllm-omni worker's endpoint works unchanged; behind it the
gateway cuts the text into sentences with the worker's rules and sends each sentence as
its own streamed request to the worker it chooses for that sentence, pipelined, with
barge-in (``input.cancel``). One job per module:

- ``messages``: what the client sends (parsed and checked) and what the session answers;
- ``voice``: a session config turned into the one worker payload every sentence shares;
- ``playback``: where a real-time player is, hence each later sentence's deadline and gap;
- ``sentence``: one sentence's upstream request (admission, relay), its audio buffered;
- ``pipeline``: sentences dispatched ahead and delivered strictly in order, cancellable;
- ``session``: the receive loop (config, text, flush, cancel, close, limits, timers).

docs/sessions.md describes the protocol and its extensions.
"""
