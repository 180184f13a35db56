"""The embed and domains stages' parameters: the embedding model, the topic clusters, the toxicity tag."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from tokenmill.section import Fraction, Positive, Section


class Embed(Section):
    section: ClassVar[str] = "embed"
    model: Literal["wordllama/l2_supercat"] = "wordllama/l2_supercat"  # inside its wheel: nothing downloaded
    dim: Literal[64, 128, 256, 512, 1024] = 256
    chunk_chars: Annotated[int, Field(ge=100)] = 2000  # a chunk: about 500 tokens, one batch row
    max_chunks: Positive = 8  # spread over a longer document: 16,000 characters are read of any document
    batch_size: Positive = 64


class Topics(Section):
    k: Annotated[int, Field(ge=2)] = 12  # clusters of the embeddings (k-means on the unit sphere)
    min_documents: Positive = 10  # fewer topics than k where the documents would average fewer than this per
    # topic: the crawl preset's 44 documents in 12 topics left 4 of one page each, named by that page's words and
    # unable to hold a held-out document (RESULTS, "The crawl preset's domains"); the demo's 5,902 keep 12
    seed: int = 0
    iterations: Positive = 25
    terms: Positive = 6  # the most distinctive words that name a topic
    examples: Positive = 3  # the URLs (or doc_ids) nearest a topic's centre, shown beside its name


class Toxicity(Section):
    enabled: bool = True
    tag_above: Fraction = 0.9  # a score at or above it tags the document; 0.9: the knee of false positives against
    # recall per slice (RESULTS, "Toxicity": medicine 2.3% -> 0.3%, recall 93% -> 89% from 0.8)
    drop_above: Fraction | None = None  # null: nothing is removed; a score at or above it drops the document
    max_paragraphs: Positive = 1000  # a document's score: the highest of these paragraphs' scores (64 missed 4.4
    # points of recall on long pages at no speed gain: RESULTS, "Toxicity")

    @model_validator(mode="after")
    def _drop_not_below_tag(self) -> "Toxicity":
        if self.drop_above is not None and self.drop_above < self.tag_above:
            raise ValueError(f"drop_above: expected at least tag_above ({self.tag_above:g}): a dropped document "
                             f"is a tagged one, got {self.drop_above:g}")
        return self


class Domains(Section):
    section: ClassVar[str] = "domains"
    topics: Topics = Topics()
    formats: bool = True  # the format label (tokenmill.domains.formats)
    toxicity: Toxicity = Toxicity()
    label_dropped: bool = True  # also label the documents an earlier stage dropped (nearest topic, format,
    # toxicity), so the report shows the mix each stage kept and dropped; costs about an embed stage again
