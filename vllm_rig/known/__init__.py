"""What the real sources say, as data the deploy decides by: which FlashInfer release needs which SM75 fix,
which flags and config keys the pinned fork's parser accepts. The lowest floor above the host programs: it
imports nothing else of vllm_rig, so the settings schema and every stage can read it."""
