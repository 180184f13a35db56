"""DVC stage `pii`: redact e-mails, phones, IPs, Luhn-valid cards, checksum-valid IBANs and SSNs.

Usage (dvc.yaml): python stages/pii.py <input stage>
"""

import sys
from pathlib import Path

from tokenmill.docstage import map_document_shards
from tokenmill.pii import PIIProcessor
from tokenmill.pii.params import Pii
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Pii.resolve(p["pii"])  # checked before any work
    with StageRun("pii", data_root / "pii", p["pii"], input_stage=input_stage,
                  libraries=("phonenumbers",)) as run:  # its numbering plans decide what is a phone number
        run.record(map_document_shards("pii", data_root / input_stage, PIIProcessor, params, p["execution"],
                                       run.tmp))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("pii", "execution"), input_stage)
    print(f"pii: {m['counts']['in']} documents, {m['counts']['by_action'].get('modify', 0)} redacted")


if __name__ == "__main__":
    sys.exit(script(main))
