"""Train the SentencePiece tokenizer on a mixture-weighted sample and export its Hugging Face twin.

Lossless by construction (NOTES.md): identity normalisation, no dummy prefix, whitespace kept (runs of
spaces become "▁▁▁▁" pieces), newline, tab and carriage return as user-defined pieces, digits split, and
byte fallback so that no character is ever <unk>. decode(encode(text)) == text for every valid string that
does not itself contain "▁" (U+2581, SentencePiece's space marker, which decodes to a space).

Id layout (fixed, so that shards, the model and the HF tokenizer agree without looking anything up):
    0 <unk>   1 <s>   2 </s>   3 <pad>   4 .. 4+R-1 <reserved_0> .. <reserved_R-1>   then the user-defined
    pieces ("\\n", "\\t", "\\r", ...), then the 256 byte pieces <0x00> .. <0xFF>, then the learned pieces.
Specials and reserved tokens are control symbols: encoding text never produces them (a literal "</s>" in a
document is three ordinary tokens), decoding drops them. Tokenmill adds NO <s> when encoding documents;
documents are separated by </s> (the end-of-text token) in the token shards.

Determinism: the sample is a pure function of its inputs; SentencePiece uses every line of it
(input_sentence_size=0, no shuffling) with a fixed thread count, and the machine-specific fields of the
trainer spec (input path, model prefix) are blanked before the model is written, so training twice gives
byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

from tokenmill.runtime import ParamError, temporary

from .core import token_dtype
from .hf import save_hf
from .params import Tokenizer as TokenizerParams
from .sample import Source, as_stream, write_sample

FILES = ("tokenizer.model", "tokenizer.vocab", "meta.json", "hf/tokenizer.json", "hf/tokenizer_config.json")


def reserved_pieces(n: int) -> list[str]:
    return [f"<reserved_{i}>" for i in range(n)]


def sentencepiece_options(p: TokenizerParams) -> dict[str, Any]:
    """The SentencePieceTrainer arguments for the stage's params (everything but input and output)."""
    opts = dict(
        model_type=p.model_type,
        vocab_size=p.vocab_size,
        character_coverage=p.character_coverage,
        # Lossless text (NOTES.md).
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        allow_whitespace_only_pieces=True,
        byte_fallback=True,
        split_digits=True,
        user_defined_symbols=list(p.user_defined_symbols),
        control_symbols=reserved_pieces(p.num_reserved),
        unk_id=0, bos_id=1, eos_id=2, pad_id=3,
        unk_piece=p.unk_piece, bos_piece=p.bos_piece, eos_piece=p.eos_piece, pad_piece=p.pad_piece,
        max_sentencepiece_length=p.max_piece_length,
        max_sentence_length=p.max_sentence_bytes,
        # Deterministic: every line, in file order, fixed threads.
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=p.num_threads,
        minloglevel=2,
    )
    # A sample too small for vocab_size yields fewer pieces instead of failing ("Vocabulary size too high"):
    # read the real size from meta.json / Tokenizer.vocab_size, never from the parameter.
    opts["hard_vocab_limit"] = False
    return opts


def _scrub_model(model: bytes) -> bytes:
    """The model without the machine-specific trainer fields (temporary input path and model prefix)."""
    proto = pb.ModelProto()
    proto.ParseFromString(model)
    del proto.trainer_spec.input[:]
    proto.trainer_spec.model_prefix = ""
    return proto.SerializeToString(deterministic=True)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = temporary(path)
    tmp.write_bytes(data)
    os.replace(tmp, path)


def train_tokenizer(texts_by_bucket: Source, weights: Mapping[str, float] | None, params: TokenizerParams,
                    out_dir: Path | str) -> dict:
    """Train on a bucket-weighted sample; write the model, its vocabulary and the HF tokenizer to out_dir.

    texts_by_bucket: {bucket: [texts]} or a callable returning a fresh iterator of (bucket, text) pairs
    (e.g. sample.parquet_source(paths)); it is read twice. weights: {bucket: weight}, normalised over the
    buckets that have text (a weighted bucket without any is reported under missing_buckets); None: the
    corpus's own proportions. params: the stage's section (tokenmill.tokenizer.params.Tokenizer); its
    sample_weights are the stage's, not the trainer's (the stage passes them as weights).
    Writes out_dir/tokenizer.model, tokenizer.vocab, meta.json (deterministic) and hf/ (tokenizer.json,
    tokenizer_config.json, ...). Returns meta plus timings.
    """
    p = params
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tokenmill-spm-") as tmp:
        sample_path = Path(tmp) / "sample.txt"
        sample = write_sample(as_stream(texts_by_bucket), weights, p.sample_bytes, p.seed,
                              sample_path, p.max_sentence_bytes)
        sampled = time.perf_counter()
        spm.set_random_generator_seed(p.seed)
        try:
            spm.SentencePieceTrainer.train(input=str(sample_path), model_prefix=str(Path(tmp) / "tokenizer"),
                                           **sentencepiece_options(p))
        except RuntimeError as exc:  # what only the sample decides: its characters need room in the vocabulary
            raise ParamError(f"tokenizer: SentencePiece cannot train on this sample with vocab_size "
                             f"{p.vocab_size}, character_coverage {p.character_coverage}: "
                             f"{str(exc).strip().splitlines()[-1]}") from None
        trained = time.perf_counter()
        model = _scrub_model((Path(tmp) / "tokenizer.model").read_bytes())
        _write_atomic(out_dir / "tokenizer.model", model)
        shutil.copyfile(Path(tmp) / "tokenizer.vocab", out_dir / "tokenizer.vocab")

    sp = spm.SentencePieceProcessor(model_proto=model)
    meta = {
        "params": p.model_dump(exclude={"sample_weights"}),  # the trainer's: the weights are in the sample's shares
        "model_type": p.model_type,
        "vocab_size": sp.get_piece_size(),  # may end below the request on a small sample (hard_vocab_limit)
        "requested_vocab_size": p.vocab_size,
        "dtype": token_dtype(sp.get_piece_size()).name,
        "special_ids": {"unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id(), "pad": sp.pad_id()},
        "reserved_ids": {piece: sp.piece_to_id(piece) for piece in reserved_pieces(p.num_reserved)},
        "user_defined_ids": {piece: sp.piece_to_id(piece) for piece in p.user_defined_symbols},
        "adds_bos": False,
        "document_separator": "eos",
        "model_sha1": hashlib.sha1(model).hexdigest(),
        "sample": sample,
    }
    save_hf(out_dir / "tokenizer.model", out_dir / "hf")
    exported = time.perf_counter()
    _write_atomic(out_dir / "meta.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
    return {**meta, "seconds": {"sample": round(sampled - started, 3), "train": round(trained - sampled, 3),
                                "export_hf": round(exported - trained, 3),
                                "total": round(exported - started, 3)}}
