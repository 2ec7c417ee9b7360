"""data.c4.prepare offline: local C4-style jsonl.gz files, with a sentencepiece model or a Hugging Face
tokenizer folder given by path (both trained here, on the test's own documents)."""

import gzip
import json

import numpy as np
import pytest

from data.c4 import prepare as c4
from errors import UserError
from tokens import read_tokens
from vocabulary import load_tokenizer

DOCS = [f"Document {i} says: the {['quick', 'lazy', 'brown'][i % 3]} fox jumps over {i * 3} dogs." for i in range(60)]


def write_jsonl_gz(path, docs):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"text": d, "timestamp": "2019", "url": f"https://x/{i}"}) + "\n")
    return path


@pytest.fixture
def c4_files(tmp_path):
    return (write_jsonl_gz(tmp_path / "c4-train.00000-of-01024.json.gz", DOCS[:50]),
            write_jsonl_gz(tmp_path / "c4-validation.00000-of-00008.json.gz", DOCS[50:]))


def sentencepiece_model(tmp_path):
    sentencepiece = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(DOCS * 3))
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=120,
                                            model_type="bpe", bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
                                            minloglevel=2)  # Llama 2's special ids: unk 0, bos 1, eos 2
    return tmp_path / "sp.model"


def hf_tokenizer_dir(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(DOCS, trainers.BpeTrainer(vocab_size=150, special_tokens=["<unk>", "</s>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>").save_pretrained(tmp_path / "hf")
    return tmp_path / "hf"


def decode_docs(path, decode, eot):
    tokens, _ = read_tokens(path)
    ids = tokens.tolist()
    assert ids[-1] == eot
    cuts = [i for i, t in enumerate(ids) if t == eot]
    return [decode(ids[a + 1 if j else 0:b]) for j, (a, b) in enumerate(zip([0, *cuts], cuts))]


@pytest.mark.parametrize("kind", ["sentencepiece", "hf"])
def test_c4_files_with_a_tokenizer_given_by_path(kind, c4_files, tmp_path):
    train, val = c4_files
    spec = str(sentencepiece_model(tmp_path) if kind == "sentencepiece" else hf_tokenizer_dir(tmp_path))
    out = tmp_path / "out"
    counts = c4.main(["--input", str(train), "--val-input", str(val), "--tokenizer", spec, "--out", str(out),
                      "--num-proc", "1"])
    tok = load_tokenizer(spec)
    if kind == "sentencepiece":
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=spec)
        assert tok.eot == 2 and tok.n_vocab == 120
        decode = sp.decode
    else:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(spec)
        decode = hf.decode
    assert read_tokens(out / "train.bin")[1] == tok.n_vocab
    # C4's own validation file is the validation split, in order; each document round-trips
    got_val = decode_docs(out / "val.bin", decode, tok.eot)
    assert [d.replace(" ", "") for d in got_val] == [d.replace(" ", "") for d in DOCS[50:]]
    assert len(decode_docs(out / "train.bin", decode, tok.eot)) == 50
    assert counts["val"] == sum(len(tok.encode(d)) + 1 for d in DOCS[50:])


def test_c4_default_is_gpt2_bpe_and_a_random_split(c4_files, tmp_path):
    from tests.helpers import gpt2_or_skip

    enc = gpt2_or_skip()
    train, _ = c4_files
    counts = c4.main(["--input", str(train), "--test-size", "0.2", "--out", str(tmp_path / "out"), "--num-proc", "1"])
    tokens, vocab = read_tokens(tmp_path / "out" / "train.bin")
    assert vocab == 50257 and counts["train"] == len(tokens)
    assert int(np.sum(tokens == enc.eot_token)) == 40  # 50 documents, a fifth to validation


def test_c4_hub_shard_names_and_limits():
    files = c4.hub_files(2, 1)
    assert files == {"train": ["en/c4-train.00000-of-01024.json.gz", "en/c4-train.00001-of-01024.json.gz"],
                     "validation": ["en/c4-validation.00000-of-00008.json.gz"]}
    with pytest.raises(UserError, match="--shards must be in 1..1024"):
        c4.hub_files(0, 1)


def test_a_tokenizer_path_that_is_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="neither tiktoken:NAME, a sentencepiece .model file, nor a tokenizer folder"):
        load_tokenizer(str(tmp_path / "nope"))


def test_a_refused_command_downloads_nothing(tmp_path, monkeypatch):
    # the tokenizer is checked and --out taken before the Hub is asked: a dataset already in --out (no
    # --overwrite) or a tokenizer that cannot load is refused without a download
    from data.openwebtext import prepare as owt

    asked = []
    for module in (c4, owt):
        monkeypatch.setattr(module, "load_hub", lambda *a, **k: asked.append(a) or pytest.fail("the Hub was asked"))
    out = tmp_path / "data"
    out.mkdir()
    for name in ("train.bin", "val.bin"):
        (out / name).write_bytes(b"a dataset already here")
    tokenizer = str(sentencepiece_model(tmp_path))  # one that loads offline
    for main in (c4.main, owt.main):
        with pytest.raises(UserError, match="--overwrite"):
            main(["--out", str(out), "--tokenizer", tokenizer])
        with pytest.raises(UserError, match="--tokenizer"):
            main(["--out", str(tmp_path / "new"), "--tokenizer", str(tmp_path / "no_such_tokenizer")])
    assert asked == [] and not (tmp_path / "new").exists()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {n: b"a dataset already here" for n in ("train.bin", "val.bin")}
