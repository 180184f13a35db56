"""Model FLOPs utilisation: achieved FLOPs over the devices' dense peak.

MFU = tokens/s x FLOPs per token / (devices x peak FLOP/s per device), with FLOPs per token from
config.model_size (6 x matmul parameters + 12 x n_layers x d_model x seq_len, and the causal variant).
"""

from __future__ import annotations

# Dense bf16 tensor-core peaks without sparsity, from the vendors' data sheets (FLOP/s per device).
PEAK_FLOPS = {
    "H100 SXM": 989e12,  # "NVIDIA H100 80GB HBM3"
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,  # "NVIDIA H100 NVL": 1,671 TFLOP/s with sparsity on its data sheet
    "H200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
}


def peak_flops(device_name: str, override: float | None = None) -> float | None:
    """Peak FLOP/s of one device by its torch.cuda.get_device_name(); None when unknown (CPUs: no MFU)."""
    if override:
        return float(override)
    name = device_name.upper()
    if "H100" in name:
        for variant in ("PCIe", "NVL"):
            if variant.upper() in name:
                return PEAK_FLOPS[f"H100 {variant}"]
        return PEAK_FLOPS["H100 SXM"]
    for key, value in PEAK_FLOPS.items():
        if key.upper() in name:
            return value
    return None


def mfu(tokens_per_second: float, flops_per_token: float, devices: int, peak: float | None) -> float | None:
    """Fraction of the devices' peak that the model's FLOPs amount to (None without a peak)."""
    if not peak:
        return None
    return tokens_per_second * flops_per_token / (devices * peak)
