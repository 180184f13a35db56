"""A Hugging Face `tokenizers` twin of the SentencePiece model that gives exactly the same ids.

Built directly from the SentencePiece ModelProto (NOTES.md: transformers' own conversions give different
ids or crash on BPE models):
  * BPE: the vocabulary with SentencePiece's ids; the merges are every split of a learned piece into two
    learned pieces, ranked by the merged piece's score (SentencePiece merges the adjacent pair whose union
    scores highest; ranking merges by that score reproduces it). Unigram: the pieces and their scores.
  * Byte fallback for characters outside the vocabulary, as SentencePiece does.
  * No normaliser; a Metaspace pre-tokenizer that turns " " into "▁" without prepending one and without
    splitting (SentencePiece encodes a whole line as one sequence: "▁▁▁▁def" may be one piece).
  * User-defined pieces ("\\n", "\\t", "\\r") as ordinary added tokens: split out first, as SentencePiece's
    prefix matcher does. Control pieces (<unk>, <s>, </s>, <pad>, <reserved_N>) as special added tokens
    so that decode(skip_special_tokens=True) drops them — but SentencePiece never produces them from text,
    so literal "</s>" in a document must not become the eos id: tokenizer_config.json sets
    split_special_tokens=True (transformers then encodes special strings as plain text), and users of the
    bare `tokenizers.Tokenizer` must set `tok.encode_special_tokens = True` (it is not saved in
    tokenizer.json; `hf_tokenizer()` below does it).
  * Post-processor: "$A" alone — no <s>, no </s>. add_special_tokens=True (the default) therefore gives
    the same ids as sp.encode(text), which is what tokenmill writes into shards.
"""

from __future__ import annotations

from pathlib import Path

from sentencepiece import sentencepiece_model_pb2 as pb
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "▁"


def load_proto(model_file: Path | str) -> pb.ModelProto:
    proto = pb.ModelProto()
    proto.ParseFromString(Path(model_file).read_bytes())
    return proto


def bpe_merges(proto: pb.ModelProto) -> list[tuple[str, str]]:
    """Every (left, right) pair of learned pieces whose concatenation is a learned piece, best first.

    Only NORMAL pieces take part: SentencePiece never merges into or out of control, byte or unknown
    pieces, and user-defined pieces are matched before merging starts.
    """
    pieces = proto.pieces
    normal = {p.piece: i for i, p in enumerate(pieces) if p.type == NORMAL}
    merges = []
    for piece, i in normal.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                merges.append((-pieces[i].score, i, normal[left], normal[right], left, right))
    merges.sort()
    return [(m[4], m[5]) for m in merges]


def build_tokenizer(proto: pb.ModelProto):
    """The `tokenizers.Tokenizer` equivalent of a (lossless, tokenmill-trained) SentencePiece model."""
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    if norm.add_dummy_prefix or norm.remove_extra_whitespaces or norm.precompiled_charsmap:
        raise ValueError("only identity-normalised models without dummy prefix convert exactly "
                         "(add_dummy_prefix=False, remove_extra_whitespaces=False, normalization 'identity')")
    if not spec.byte_fallback:
        raise ValueError("the model was trained without byte_fallback")
    pieces = list(proto.pieces)
    unk_id = next(i for i, p in enumerate(pieces) if p.type == UNKNOWN)
    if spec.model_type == pb.TrainerSpec.BPE:
        vocab = {p.piece: i for i, p in enumerate(pieces)}
        model = models.BPE(vocab=vocab, merges=bpe_merges(proto), unk_token=pieces[unk_id].piece,
                           byte_fallback=True, fuse_unk=False, dropout=None)
    elif spec.model_type == pb.TrainerSpec.UNIGRAM:
        # SentencePiece leaves control, unknown and byte pieces out of its lattice; here they are in the
        # vocabulary, so give them a score no segmentation would choose (literal "<0x41>" or "<s>" in a text
        # would otherwise win with their score of 0). The unknown-character penalty moves with the minimum
        # score, but every path pays it once per unknown character, so no choice changes.
        lowest = min(p.score for p in pieces if p.type == NORMAL)
        vocab = [(p.piece, p.score if p.type in (NORMAL, USER_DEFINED) else lowest - 1000.0) for p in pieces]
        model = models.Unigram(vocab, unk_id=unk_id, byte_fallback=True)
    else:
        raise ValueError(f"unsupported SentencePiece model type {spec.model_type}")

    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    # Added tokens keep their SentencePiece ids (they are already in the model's vocabulary).
    tok.add_special_tokens([AddedToken(p.piece, special=True, normalized=False)
                            for p in pieces if p.type in (UNKNOWN, CONTROL)])
    tok.add_tokens([AddedToken(p.piece, special=False, normalized=False)
                    for p in pieces if p.type == USER_DEFINED])
    for i, p in enumerate(pieces):
        assert tok.token_to_id(p.piece) == i, f"piece {p.piece!r} got id {tok.token_to_id(p.piece)}, not {i}"
    return tok


def save_hf(model_file: Path | str, out_dir: Path | str) -> Path:
    """Write tokenizer.json, tokenizer_config.json (and whatever else save_pretrained writes) to out_dir."""
    from transformers import PreTrainedTokenizerFast  # transformers: 1.1 s to import, only to save or check the HF copy

    proto = load_proto(model_file)
    spec = proto.trainer_spec
    tok = build_tokenizer(proto)
    reserved = [p.piece for p in proto.pieces
                if p.type == CONTROL and p.piece not in (spec.bos_piece, spec.eos_piece, spec.pad_piece)]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=spec.unk_piece, bos_token=spec.bos_piece, eos_token=spec.eos_piece, pad_token=spec.pad_piece,
        additional_special_tokens=reserved,
        add_bos_token=False, add_eos_token=False,
        split_special_tokens=True,  # literal "<s>" in text is text, as in SentencePiece
        clean_up_tokenization_spaces=False,  # decode must not touch spaces (" ." stays " .")
        model_max_length=1 << 30,
    )
    out_dir = Path(out_dir)
    fast.save_pretrained(str(out_dir))
    return out_dir / "tokenizer.json"


def hf_tokenizer(hf_dir_or_file: Path | str):
    """The bare `tokenizers.Tokenizer` from tokenizer.json, set to treat special strings in text as text."""
    path = Path(hf_dir_or_file)
    tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
    tok.encode_special_tokens = True
    return tok


def transformers_tokenizer(hf_dir: Path | str):
    """AutoTokenizer over the saved directory (what lm-eval and exported checkpoints load)."""
    from transformers import AutoTokenizer  # as above

    return AutoTokenizer.from_pretrained(str(hf_dir))
