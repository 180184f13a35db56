"""DVC stage `pii`: redact e-mails, phones, IPs, Luhn-valid cards, checksum-valid IBANs and SSNs.

Usage (dvc.yaml): python stages/pii.py <input stage>
"""

import sys

from tokenmill.docstage import run_document_stage
from tokenmill.pii import PIIProcessor
from tokenmill.runtime import load_params, script


def main(input_stage: str) -> None:
    p = load_params("pii", "execution")
    m = run_document_stage("pii", input_stage, PIIProcessor, p["pii"], p["execution"],
                           libraries=("phonenumbers",))  # its numbering plans decide what is a phone number
    print(f"pii: {m['counts']['in']} documents, {m['counts']['by_action'].get('modify', 0)} redacted")


if __name__ == "__main__":
    sys.exit(script(main))
