# Profile "fork_validated": the fork's own validated runtime set, its requirements untouched. Hosts in
# inventory/hosts.yml with `profile: fork_validated` get the default model and service with FlashInfer
# 0.6.8.post1 (the fork's pin: it predates the SM75 shared-memory overflow, so no patch and no overrides).

runtime_kind = "fork"  # the fork's own validated set
flashinfer_version = "0.6.8.post1"  # the fork's requirements/cuda.txt pin
