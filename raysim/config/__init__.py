"""Run configuration: sections declared once (:mod:`.sections`), whole configs, presets and overrides (:mod:`.build`).

Imports: core, data (the names of sources and partitioners), privacy (which channels a method sends). Never the
engine.
"""

from raysim.config.build import (  # noqa: F401
    NOT_COMPUTED,
    Config,
    as_recorded,
    build_config,
    check_runnable,
    dump_yaml,
    load_preset,
    other_method_note,
    own_setting,
    parse_override,
    preset_for_method,
    preset_method,
    presets,
    setting_note,
)
from raysim.config.sections import (  # noqa: F401
    DEFAULT_TRACKING_DIR,
    PRECISIONS,
    SECTIONS,
    CheckpointConfig,
    CompressionConfig,
    DataConfig,
    FederationConfig,
    ModelConfig,
    PrivacyConfig,
    ResourceConfig,
    TrackingConfig,
    TrainConfig,
    beside_store,
)
