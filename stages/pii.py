"""DVC stage `pii`: redact e-mails, phones, IPs, Luhn-valid cards, checksum-valid IBANs and SSNs."""

from tokenmill.docstage import run_document_stage
from tokenmill.runtime import load_params


def main() -> None:
    p = load_params()
    m = run_document_stage("pii", "filter", "tokenmill.pii:PIIProcessor", p["pii"], p.get("execution"))
    print(f"pii: {m['counts']['in']} documents, {m['counts']['by_action'].get('modify', 0)} redacted")


if __name__ == "__main__":
    main()
