"""What the workers say, heard: per-worker audio quality from the PCM the gateway relays.

- ``score``: pure numpy signal checks of one clip (HNR, clipping, silence, energy);
- ``sampler``: picks a share of completed streams, copies their PCM and scores it on a
  thread of its own, off the request path (a bounded queue, dropped and counted when busy);
- ``judge``: each worker's recent verdicts; a worker below the floor is ejected (``quality``);
- ``probe``: a probe text for workers whose traffic is too thin to sample;
- ``metrics``: the ``higgs_gateway_quality_*`` series.
"""
