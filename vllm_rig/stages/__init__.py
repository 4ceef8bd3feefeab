"""One package per stage of the deploy, in flow order: preflight, driver, cuda, model, runtime, verify,
service, bench. A stage's package holds its decisions, facts, operations and templates; its host-side
programs are in `vllm_rig.host`, and `tasks/<stage>.py` is the short entry that runs it."""
