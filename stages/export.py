"""DVC stage `export`: the full run's weights as a Hugging Face checkpoint (data/export/hf).

Usage (dvc.yaml): python stages/export.py <run directory under data/train> <tokenizer stage>
`export.step` null exports the final weights; a step number exports that DCP checkpoint (gathered from its
FSDP / TP shards in one process).
"""

import sys

from tokenmill.export import export_run
from tokenmill.export.params import Export
from tokenmill.runtime import StageRun, input_id, load_params, script


def main(run: str, tokenizer_stage: str) -> int:
    params = Export.resolve(load_params("export")["export"])
    run_dir, tok_dir = f"data/train/{run}", f"data/{tokenizer_stage}/hf"
    with StageRun("export", "data/export", params.model_dump(),
                  libraries=("torch", "safetensors", "transformers")) as run_:
        run_.input_hashes.update({run: input_id(run_dir), tokenizer_stage: input_id(f"data/{tokenizer_stage}")})
        summary = export_run(run_dir, tok_dir, run_.tmp / "hf", step=params.step)
        run_.extra["export"] = summary
    print(f"export: {run} ({summary.get('source')}) -> data/export/hf ({summary.get('architecture')})")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
