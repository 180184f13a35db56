"""Export a training run as a Hugging Face checkpoint (export_run); the stage's parameters: tokenmill.export.params.

The exporter's names load on first use (PEP 562): the check stage reads this package's schema and must not pay
for torch's import with it (1.5 s of the check's 2.8 s when it did, measured with `python -X importtime`).
"""

__all__ = ["ExportError", "export_run", "hf_config", "to_hf_state_dict"]


def __getattr__(name: str):
    if name in __all__:
        from tokenmill.export import hf  # torch, safetensors: see the module docstring

        return getattr(hf, name)
    raise AttributeError(f"module 'tokenmill.export' has no attribute {name!r}")
