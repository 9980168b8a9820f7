"""The tuner. Importing the package registers the cost-model classes that saved models may name
(cost_model.BLOB_KINDS), so that load_cost_model can read any of them."""

from minitc.autotune import mtl_model  # noqa: F401  (registers "mtl")
