"""Export a training run as a Hugging Face checkpoint (export_run)."""

from tokenmill.export.hf import ExportError, export_run, hf_config, to_hf_state_dict

__all__ = ["ExportError", "export_run", "hf_config", "to_hf_state_dict"]
