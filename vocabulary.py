"""Every vocabulary the project knows, in one place: how text becomes token ids and back.

- bytes (a vocabulary of 256, the embedded corpus's): the ids are the text's UTF-8 bytes;
- GPT-2's BPE (50,257 tokens), through tiktoken (its cache, ``TIKTOKEN_CACHE_DIR``, or a download);
- for preparing data, any tokenizer named by a string (``load_tokenizer``): ``tiktoken:NAME``, the path of a
  sentencepiece ``tokenizer.model`` (Llama 2's), or a Hugging Face tokenizer directory;
- for a Hugging Face export, the byte-level and GPT-2 tokenizers as transformers' objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from errors import UserError, require

GPT2_VOCAB = 50257
GPT2_FILES = {  # tiktoken's sources for GPT-2's BPE, and the name each has in a Hugging Face directory
    "vocab.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
    "merges.txt": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
}


def newline(vocab_size: int) -> int:
    """The newline's token id: the byte 10, GPT-2's BPE 198, Llama 2's sentencepiece 13 (<0x0A>); else 0."""
    return 10 if vocab_size <= 256 else {50257: 198, 32000: 13}.get(vocab_size, 0)


def decode(ids: list[int], vocab_size: int) -> str:
    """Token ids as text: bytes for byte-level data, GPT-2 BPE otherwise (the ids if it is unavailable)."""
    if vocab_size <= 256:
        return bytes(ids).decode("utf-8", errors="replace")
    try:
        import tiktoken

        return tiktoken.get_encoding("gpt2").decode(ids)
    except Exception:  # no tokenizer files offline: show the ids
        return " ".join(map(str, ids))


def encoder_for(vocab: int, hf_dir: Path | None = None):
    """(encode, decode) for the model's vocabulary."""
    if hf_dir is not None and any((hf_dir / name).exists() for name in ("tokenizer.json", "vocab.json")):
        require("transformers", "hf")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(hf_dir)
        return (lambda text: tok(text)["input_ids"]), (lambda ids: tok.decode(ids))
    if vocab <= 256:
        return (lambda text: list(text.encode("utf-8"))), (lambda ids: bytes(ids).decode("utf-8", errors="replace"))
    if vocab == GPT2_VOCAB:
        try:
            import tiktoken

            enc = tiktoken.get_encoding("gpt2")
        except Exception as e:
            raise UserError(f"GPT-2's tokenizer cannot be loaded here ({type(e).__name__}); set TIKTOKEN_CACHE_DIR to "
                            "a folder with tiktoken's GPT-2 files, or run where they can be downloaded") from e
        return (lambda text: enc.encode(text, allowed_special={"<|endoftext|>"})), enc.decode
    raise UserError(f"no tokenizer is known for a vocabulary of {vocab} tokens; export the model with a tokenizer "
                    "and pass its folder as --init_from")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as a printable character. Printable Latin-1 bytes
    are themselves; the others, in order, are the characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}


def byte_tokenizer():
    """A Hugging Face tokenizer whose ids are the UTF-8 bytes of the text: the embedded corpus's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: b for b, char in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)


def gpt2_tokenizer(folder: Path):
    """GPT-2's BPE tokenizer from tiktoken's files (its cache, or downloaded), or None if unavailable."""
    try:
        from tiktoken.load import read_file_cached

        for name, url in GPT2_FILES.items():
            (folder / name).write_bytes(read_file_cached(url))
    except Exception as e:  # offline with no cache
        print(f"note: GPT-2's tokenizer files are not available here ({type(e).__name__}); no tokenizer written. "
              "Set TIKTOKEN_CACHE_DIR to a folder holding tiktoken's GPT-2 files, or export where they download")
        return None
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # with GPT-2's split pattern
    tok.decoder = decoders.ByteLevel()
    end = "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end, unk_token=end,
                                   clean_up_tokenization_spaces=False)


@dataclass
class Tokenizer:
    """The three things a token file needs from a tokenizer."""

    encode: object  # text -> list of ids, without special tokens
    eot: int  # appended to every document
    n_vocab: int


_LOADED: dict = {}


def load_tokenizer(spec) -> Tokenizer:
    """The tokenizer ``spec`` names (cached per process), or wrap a tiktoken Encoding object."""
    if not isinstance(spec, str):
        return Tokenizer(spec.encode_ordinary, spec.eot_token, spec.n_vocab)
    if spec not in _LOADED:
        try:
            _LOADED[spec] = _load(spec)
        except UserError:
            raise
        except Exception as e:  # whatever tiktoken, sentencepiece or transformers raise for a file they cannot read
            first = (str(e).strip().splitlines() or [""])[0][:160]
            raise UserError(f"--tokenizer {spec} cannot be loaded ({type(e).__name__}: {first}); give tiktoken:NAME, a "
                            "sentencepiece .model file, or a Hugging Face tokenizer folder") from None
    return _LOADED[spec]


def _load(spec: str) -> Tokenizer:
    if spec.startswith("tiktoken:"):
        import tiktoken

        enc = tiktoken.get_encoding(spec.removeprefix("tiktoken:"))
        return Tokenizer(enc.encode_ordinary, enc.eot_token, enc.n_vocab)
    path = Path(spec)
    if path.is_file():  # a sentencepiece model
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        if sp.eos_id() < 0:
            raise UserError(f"--tokenizer {path}: the sentencepiece model has no end-of-sequence token")
        return Tokenizer(sp.encode, sp.eos_id(), sp.get_piece_size())
    if path.is_dir():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        if tok.eos_token_id is None:
            raise UserError(f"--tokenizer {path}: the tokenizer has no end-of-sequence token")
        return Tokenizer(lambda text: tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id, len(tok))
    raise UserError(f"--tokenizer {spec}: neither tiktoken:NAME, a sentencepiece .model file, nor a tokenizer folder")
