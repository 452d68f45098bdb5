"""One typed configuration, loaded from ``conf/`` and validated at load.

A package: ``dataset`` (a dataset's file), ``kafka`` and ``settings`` (a profile's sections),
``loading`` (``Config``, ``load_config``), ``base`` (what they share). Its names are
imported from here.

Layout::

    conf/loglake.yaml          profiles (local, cluster): kafka, lake, spark, speed
    conf/datasets/<name>.yaml  one dataset per file

Every error names the file and the key, says what was expected, and is raised at load:
nothing downstream re-checks. ``${ENV_VAR}`` in a value is replaced from the
environment, ``${file:/path}`` by the file's content (secrets: a file the process reads, as
Docker and Kubernetes mount them); an unset variable or an unreadable file is an error, never
an empty string.
Only the selected profile is expanded, so the cluster profile's variables need not be
set to run locally.
"""

from loglake.core.config.base import (
    FieldType, Format, LAYERS, MIN_VACUUM_RETENTION_HOURS, REGISTRY_FORMATS)
from loglake.core.config.dataset import (
    Dataset, Expectation, FieldSpec, Maintenance, RegistryField, RegistrySchemas, Tables, WriterSchema,
    check_vacuum_retention, expectation_label)
from loglake.core.config.kafka import (
    BROKER_USER, KafkaSecurity, KafkaSettings, embedded_ca_file, jaas_quote)
from loglake.core.config.settings import (
    AlertSettings, DeploymentSettings, LakeSettings, LineageSettings, LocalClusterSettings, MetricsSettings,
    ObjectStoreSettings, Profile, RegistrySettings, SparkSettings, SpeedSettings, memory_bytes)
from loglake.core.config.loading import (
    Config, load_config, load_dataset)

__all__ = [
    "FieldType", "Format", "LAYERS", "MIN_VACUUM_RETENTION_HOURS", "REGISTRY_FORMATS", "Dataset", "Expectation",
    "FieldSpec", "Maintenance", "RegistryField", "RegistrySchemas", "Tables", "WriterSchema",
    "check_vacuum_retention", "expectation_label", "BROKER_USER", "KafkaSecurity", "KafkaSettings",
    "embedded_ca_file", "jaas_quote", "AlertSettings", "DeploymentSettings", "LakeSettings", "LineageSettings",
    "LocalClusterSettings", "MetricsSettings", "ObjectStoreSettings", "Profile", "RegistrySettings",
    "SparkSettings", "SpeedSettings", "memory_bytes", "Config", "load_config", "load_dataset",
]
