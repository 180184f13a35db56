"""A toxicity score per document: alt-profanity-check's linear model (TF-IDF of words, a linear SVM calibrated to
a probability; trained on labelled offensive comments, shipped inside its wheel, so it runs offline).

The score is a tag, not a verdict: the guide's warning is that a toxicity filter's danger is deleting whole
classes of valuable text (medicine, law, crime reporting, mental-health support, code comments, news), so the
default removes nothing and the false-positive rate is measured per slice (benchmarks/RESULTS.md, "Toxicity").
A document is scored as the highest of its paragraphs' scores (a slur in one reply of a long forum page is what
a reviewer wants to find; the whole page's average would drown it), over at most `max_paragraphs` paragraphs.
"""

from __future__ import annotations

import numpy as np

_MODEL = None


def _model():
    global _MODEL
    if _MODEL is None:
        import profanity_check  # 1-3 s (scikit-learn and the model): imported where documents are scored

        _MODEL = profanity_check
    return _MODEL


def paragraphs(text: str, max_paragraphs: int, min_chars: int = 20) -> list[str]:
    """The document's paragraphs (blank-line separated, else lines) of at least min_chars characters, at most
    max_paragraphs of them, spread evenly over the document; the whole text when none is long enough."""
    parts = [p.strip() for p in text.split("\n\n")]
    if len(parts) < 2:
        parts = [p.strip() for p in text.split("\n")]
    parts = [p for p in parts if len(p) >= min_chars] or [text.strip()]
    if len(parts) > max_paragraphs:
        pick = np.linspace(0, len(parts) - 1, max_paragraphs).round().astype(int)
        parts = [parts[i] for i in pick]
    return parts


def scores(texts: list[str], max_paragraphs: int = 1000) -> np.ndarray:
    """The toxicity score of each text in [0, 1]: the highest of its paragraphs' probabilities."""
    owner, pieces = [], []
    for i, text in enumerate(texts):
        for p in paragraphs(text or "", max_paragraphs):
            owner.append(i)
            pieces.append(p)
    out = np.zeros(len(texts), dtype=np.float64)
    if pieces:
        np.maximum.at(out, np.asarray(owner), np.asarray(_model().predict_prob(pieces), dtype=np.float64))
    return out
