import sys

from vllm_rig.cli.rig import main

sys.exit(main(sys.argv[1:]))
