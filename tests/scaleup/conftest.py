"""Scale-up tests run offline: no hub look-ups, tiny models built from configs."""

import os

# Set before transformers is imported by any test module of this folder.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Ray/verl stay quiet and local; the registries need no runtime.
os.environ.setdefault("VERL_USE_EXTERNAL_PLUGINS", "none")
