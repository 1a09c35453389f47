"""``higgs-gateway acceptance``: revalidate a GPU fleet the way the profiles' notes ask.

- ``variants``: what is launched (both profiles, and the low-latency Stage 0 on the TRT-LLM
  XQA decode path by ``attention_config.use_trtllm_attention``) and with which command;
- ``measure``: one variant's worker through the supervisor, its sweep and quality rounds;
- ``checks``: the pass/fail lines (calibration, the FlashInfer A/B, the crossover, quality);
- ``report``: the notes-shaped report, the curves in ``tune``'s format, the thresholds;
- ``cli``: the command.
"""
