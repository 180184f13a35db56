"""The tokenizer stage's parameters: SentencePiece's training and the sample it reads."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from tokenmill.section import Count, Positive, Section


class Tokenizer(Section):
    section: ClassVar[str] = "tokenizer"
    sample_weights: dict[str, Annotated[float, Field(ge=0)]] = {}  # bucket -> share of the training sample
    model_type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: Positive = 16384
    sample_bytes: Positive = 20_000_000  # UTF-8 bytes of documents in the training sample
    seed: int = 1234
    num_reserved: Count = 16  # <reserved_0> .. : control ids kept free for later use (chat markers, FIM, ...)
    user_defined_symbols: list[str] = ["\n", "\t", "\r"]
    character_coverage: Annotated[float, Field(gt=0, le=1)] = 0.9999  # rarer characters: byte fallback
    max_piece_length: Positive = 16
    max_sentence_bytes: Positive = 8192  # longer training lines are cut (SentencePiece would skip them)
    num_threads: Positive = 1  # part of the result for unigram (float sums), so fixed rather than os.cpu_count()
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"

    @model_validator(mode="after")
    def _room_for_pieces(self) -> "Tokenizer":
        if "\n" not in self.user_defined_symbols:
            raise ValueError('user_defined_symbols: must contain "\\n" (training lines cannot hold it otherwise)')
        # Byte fallback keeps 256 byte pieces; the four specials, the reserved ids and the user symbols come on
        # top. How many more the sample's characters need only the sample says (the stage names it then).
        fixed = 256 + 4 + self.num_reserved + len(self.user_defined_symbols)
        if self.vocab_size <= fixed:
            raise ValueError(f"vocab_size: expected more than {fixed} (256 byte pieces, 4 specials, "
                             f"{self.num_reserved} reserved, {len(self.user_defined_symbols)} user symbols), "
                             f"got {self.vocab_size}")
        return self
