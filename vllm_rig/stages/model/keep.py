"""Models (keep): after the service proved the model it serves, record it as served and keep `models_keep`
models served before it on disk; older ones are removed, each with the space it freed printed.

vllm_rig/host/model_catalogue.py does it on the host (huggingface_hub's delete_revisions, so the tools venv's
python) and refuses to remove the model the service serves (the
unit's --model, the running server's, the one just proven). A switch back to a kept model downloads nothing.
"""

from pyinfra.api import deploy

from vllm_rig.core.host_package import host_programs
from vllm_rig.core.run import host_failed
from vllm_rig.paths import MODELS_RECORD, Layout
from vllm_rig.settings import Settings
from vllm_rig.stages.model.operations import ServedModel, models_kept


@deploy("Models (keep)")
def keep_models(s: Settings) -> None:
    if host_failed():
        return
    layout = Layout.of(s)
    host_programs(layout.host_package)
    models_kept(
        name=f"{s.model} recorded as served; {s.models_keep} model(s) served before it kept",
        served=ServedModel.of(s),
        keep=s.models_keep,
        python=layout.tools_python,
        package=layout.host_package,
        record=MODELS_RECORD,
        unit_file=layout.unit_path,
    )
