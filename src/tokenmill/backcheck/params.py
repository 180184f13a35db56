"""The backcheck stage's parameters: the cosine thresholds and what is done with what they find."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from tokenmill.section import Positive, Section

Cosine = Annotated[float, Field(gt=0, le=1)]


class Duplicates(Section):
    enabled: bool = True
    # Cosine of two documents' vectors at or above which they are one cluster's: 0.94, the best F0.5 (precision
    # weighs twice: a dropped non-duplicate is lost data) on 280 labelled pairs, precision 0.97 recall 0.79, and
    # on pairs it was not chosen on 0.98 / 0.78 (RESULTS, "Embedding back-checks").
    threshold: Cosine = 0.94
    action: Literal["report", "drop"] = "report"  # drop: all but the longest document of each cluster
    neighbours: Positive = 16  # nearest documents looked up per document (a cluster grows through them)
    # Below this many documents the search is exact (faiss IndexFlatIP); above, an inverted file of
    # 4·sqrt(n) k-means cells, `probe` of them searched per document (SemDeDup's k-means partition).
    exact_below: Positive = 50_000
    probe: Positive = 8


class Contamination(Section):
    enabled: bool = True
    # Cosine of a document to a benchmark item's question and answer at or above which the document is a
    # `suspect` (when the n-gram layer did not already flag it): 0.85, where no clean document on an item's topic
    # (0 of 126) and none of the demo's 5,902 documents is one (at 0.8: two Python reference pages); recall per
    # rewrite kind: RESULTS, "Embedding back-checks".
    threshold: Cosine = 0.85
    action: Literal["report", "drop"] = "report"
    # An item paraphrased inside a longer page is invisible to the page's pooled vector (0 of 504 planted rewrites
    # found at any threshold): each paragraph, and each pair of neighbouring paragraphs, of a document of more
    # than one is embedded on its own as well, and the document's cosine is the highest. Planted in the middle
    # of real pages, recall returns to what it is for the rewrite alone (0.87 / 0.77 / 0.81 / 0.50 per kind at
    # 0.85), still no false positive among the clean pages and 1 of the demo's 5,902 documents; fixed windows of
    # 400-1,000 characters found 0-32% (RESULTS, "Embedding back-checks"). The cost: the stage's time
    # x14 on the demo (16.5 s per 1,000 documents against 1.16), more than the embed stage's.
    paragraphs: bool = True
    min_paragraph_words: Positive = 8  # a shorter window cannot hold a question with its answer


class Backcheck(Section):
    section: ClassVar[str] = "backcheck"
    duplicates: Duplicates = Duplicates()
    contamination: Contamination = Contamination()
