"""The Tokenizer every later stage uses: SentencePiece underneath, the id rules of tokenmill on top."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from .hf import hf_tokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    """Token shards hold uint16 while every id fits (ids run 0 .. vocab_size-1), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 65536 else np.uint32)


class Tokenizer:
    """A trained tokenmill tokenizer, loaded from the directory train_tokenizer wrote.

    encode() never adds <s> or </s>: a token shard is encode(doc_1) + [eos_id] + encode(doc_2) + [eos_id] ...
    """

    def __init__(self, model_dir: Path | str):
        self.dir = Path(model_dir)
        path = self.dir / "tokenizer.model" if self.dir.is_dir() else self.dir
        self.sp = spm.SentencePieceProcessor(model_file=str(path))
        self.vocab_size: int = self.sp.get_piece_size()
        self.eos_id: int = self.sp.eos_id()
        self.bos_id: int = self.sp.bos_id()
        self.pad_id: int = self.sp.pad_id()
        self.unk_id: int = self.sp.unk_id()
        self.dtype = token_dtype(self.vocab_size)

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.dir)!r}, vocab_size={self.vocab_size})"

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Ids of many texts; num_threads > 1 uses SentencePiece's own threads (results identical)."""
        return self.sp.encode(list(texts), num_threads=num_threads)

    def encode_documents(self, texts: Iterable[str], num_threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Documents as one token array, each followed by eos, and each document's length (eos included)."""
        ids = self.encode_batch(list(texts), num_threads=num_threads)
        lengths = np.fromiter((len(x) + 1 for x in ids), dtype=np.int64, count=len(ids))
        flat = np.empty(int(lengths.sum()), dtype=self.dtype)
        pos = 0
        for x, n in zip(ids, lengths):
            flat[pos:pos + n - 1] = x
            flat[pos + n - 1] = self.eos_id
            pos += n
        return flat, lengths

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of ids; control ids (<s>, </s>, <pad>, <reserved_N>) decode to nothing."""
        if isinstance(ids, np.ndarray):
            ids = ids.tolist()
        return self.sp.decode(list(ids))

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def piece_to_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)

    @cached_property
    def byte_mask(self) -> np.ndarray:
        """mask[id] is True for the 256 byte-fallback pieces <0x00> .. <0xFF>."""
        return np.array([self.sp.is_byte(i) for i in range(self.vocab_size)], dtype=bool)

    @cached_property
    def control_ids(self) -> list[int]:
        return [i for i in range(self.vocab_size) if self.sp.is_control(i)]

    @property
    def hf_dir(self) -> Path:
        return (self.dir if self.dir.is_dir() else self.dir.parent) / "hf"

    def hf(self):
        """The equivalent `tokenizers.Tokenizer` (same ids), special strings in text encoded as text."""
        return hf_tokenizer(self.hf_dir)
