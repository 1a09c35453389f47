"""Voice sessions: the worker's WebSocket ``/v1/audio/speech/stream``, served by the gateway.

A client written for the vllm-omni worker's endpoint works unchanged; behind it the
gateway cuts the text into sentences with the worker's rules and sends each sentence as
its own streamed request to the worker it chooses for that sentence, pipelined, with
barge-in (``input.cancel``). One job per module:

- ``messages``: what the client sends (parsed and checked) and what the session answers;
- ``voice``: a session config turned into the one worker payload every sentence shares;
- ``playback``: where a real-time player is, hence each later sentence's deadline and gap;
- ``key``: the session's hold on its API key (a token per utterance, a stream slot per sentence);
- ``budget``: the audio a session holds (received, not yet sent), capped by its window;
- ``sentence``: one sentence's upstream request (key slot, admission, relay), its audio buffered;
- ``pipeline``: sentences dispatched within the look-ahead window, delivered strictly in order, cancellable;
- ``session``: the receive loop (config, text, flush, cancel, close, limits, timers).

docs/sessions.md describes the protocol and its extensions.
"""
