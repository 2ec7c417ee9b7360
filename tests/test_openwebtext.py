"""data.openwebtext.prepare through its offline --input path, with a tiny BPE or the real GPT-2 one."""

import json
from pathlib import Path

import pytest

from data import text
from data.openwebtext import prepare as owt
from errors import UserError
from tests.helpers import gpt2_or_skip, tiny_encoding
from tokens import read_tokens

REPO = Path(__file__).resolve().parents[1]

DOCS = [f"document {i}: the theory of {'hash ' * (i % 5)}things, {i * 7} times." for i in range(40)]





@pytest.fixture
def inputs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": DOCS[:20], "url": ["x"] * 20}), tmp_path / "a.parquet")
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS[20:39]))
    (tmp_path / "c.txt").write_text(DOCS[39])
    return [tmp_path / "a.parquet", tmp_path / "b.jsonl", tmp_path / "c.txt"]


def documents(path, enc):
    tokens, vocab = read_tokens(path)
    assert vocab == enc.n_vocab
    ids = tokens.tolist()
    assert ids[-1] == enc.eot_token
    docs, start = [], 0
    for i, t in enumerate(ids):
        if t == enc.eot_token:
            docs.append(enc.decode(ids[start:i]))
            start = i + 1
    return docs


def test_local_files_round_trip_with_nanogpts_split(inputs, tmp_path):
    enc = tiny_encoding()
    out = tmp_path / "out"
    out.mkdir()
    counts = owt.prepare(owt.load_local(inputs), out, enc, test_size=0.25, seed=2357)
    train, val = documents(out / "train.bin", enc), documents(out / "val.bin", enc)
    assert sorted(train + val) == sorted(DOCS)
    # the validation documents are exactly those datasets' own split picks with nanoGPT's seed
    from datasets import Dataset

    expected = Dataset.from_dict({"text": DOCS}).train_test_split(test_size=0.25, seed=2357, shuffle=True)["test"]["text"]
    assert val == list(expected)
    assert counts == {"train": sum(len(enc.encode_ordinary(d)) + 1 for d in train),
                      "val": sum(len(enc.encode_ordinary(d)) + 1 for d in val)}
    assert not (out / ".prepare.tmp").exists()


def test_interrupted_run_leaves_no_complete_looking_output(inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    real = text.write_split

    def fail_on_train(dataset, path, vocab, shards=64):
        if path.name == "train.bin":
            raise KeyboardInterrupt
        return real(dataset, path, vocab, shards)

    monkeypatch.setattr(text, "write_split", fail_on_train)
    with pytest.raises(KeyboardInterrupt):
        owt.prepare(owt.load_local(inputs), out, tiny_encoding(), test_size=0.25)
    assert not (out / "train.bin").exists() and not (out / "val.bin").exists()


def test_missing_text_field_and_missing_file_are_clear(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"body": "hi"}) + "\n")
    with pytest.raises(UserError, match="no 'text' field"):
        owt.load_local([tmp_path / "x.jsonl"])
    with pytest.raises(UserError, match="no such file"):
        owt.load_local([tmp_path / "nope.parquet"])





def test_real_gpt2_encoding_with_worker_processes(inputs, tmp_path):
    enc = gpt2_or_skip()
    assert enc.encode_ordinary("Hello world") == [15496, 995]  # GPT-2's ids, as published
    out = tmp_path / "out"
    out.mkdir()
    counts = owt.main(["--input", *map(str, inputs), "--out", str(out), "--test-size", "0.1", "--num-proc", "2"])
    tokens, vocab = read_tokens(out / "train.bin")
    assert vocab == 50257 and tokens.dtype.itemsize == 2 and counts["train"] == len(tokens)
    assert sorted(documents(out / "train.bin", enc) + documents(out / "val.bin", enc)) == sorted(DOCS)
