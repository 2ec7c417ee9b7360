"""data.pystdlib.prepare: the embedded corpus as bytes, and the same files as BPE tokens."""

import numpy as np
import pytest

from data.pystdlib.prepare import encoded, prepare, source_files
from errors import UserError
from tests.helpers import gpt2_or_skip, tiny_encoding
from tokens import read_tokens


def fake_stdlib(root):
    """21 source files in sorted-path order, plus folders the corpus leaves out."""
    texts = {}
    for i in range(21):
        path = root / f"pkg{i % 3}" / f"mod{i:02d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        texts[path] = f"def f{i}():\n    return 'the thing {i}' * {i}  # é\n"
        path.write_text(texts[path], encoding="utf-8")
    for skipped in ("test", "site-packages"):
        (root / skipped).mkdir()
        (root / skipped / "zz.py").write_text("never = 1\n")
    ordered = [texts[p] for p in sorted(texts, key=lambda p: p.relative_to(root).as_posix())]
    return [t for i, t in enumerate(ordered) if i % 20 != 19], [ordered[19]]  # every 20th file is validation


def test_bytes_are_the_files_concatenated(tmp_path):
    train, val = fake_stdlib(tmp_path / "lib")
    counts = prepare(tmp_path / "out", tmp_path / "lib", quiet=True)
    for split, texts in (("train", train), ("val", val)):
        tokens, vocab = read_tokens(tmp_path / "out" / f"{split}.bin")
        assert vocab == 256 and counts[split] == len(tokens)
        assert bytes(np.asarray(tokens, dtype=np.uint8)) == "".join(texts).encode()


def test_train_every_keeps_every_nth_training_file_and_all_validation(tmp_path):
    train, val = fake_stdlib(tmp_path / "lib")  # 20 training files, 1 validation file (the 20th)
    counts = prepare(tmp_path / "out", tmp_path / "lib", quiet=True, train_every=4)
    kept = [train[j] for j in (0, 4, 8, 12, 16)]  # the 20th training file is the 21st file: not kept
    for split, texts in (("train", kept), ("val", val)):
        tokens, _ = read_tokens(tmp_path / "out" / f"{split}.bin")
        assert counts[split] == len(tokens) and bytes(np.asarray(tokens, dtype=np.uint8)) == "".join(texts).encode()


def test_train_every_below_one_is_refused(tmp_path):
    fake_stdlib(tmp_path / "lib")
    with pytest.raises(UserError, match="keeps no training file"):
        prepare(tmp_path / "out", tmp_path / "lib", quiet=True, train_every=0)
    assert not (tmp_path / "out").exists()


def test_threads_encode_every_file_once_in_order(tmp_path):
    fake_stdlib(tmp_path / "lib")
    files = source_files(tmp_path / "lib")
    expected = [p.read_bytes()[::-1] for p in files]  # 21 files: chunks of 3 x 2, the last one short
    assert list(encoded(files, lambda raw: raw[::-1], workers=3, chunk=2)) == expected


def split_documents(path, eot):
    tokens, _ = read_tokens(path)
    ends = np.flatnonzero(np.asarray(tokens) == eot)
    assert len(ends) and ends[-1] == len(tokens) - 1  # every file ends with end-of-text
    return [list(map(int, doc)) for doc in np.split(np.asarray(tokens), ends + 1)[:-1]]


def check_bpe(tmp_path, enc, spec):
    train, val = fake_stdlib(tmp_path / "lib")
    counts = prepare(tmp_path / "out", tmp_path / "lib", quiet=True, tokenizer=spec)
    assert prepare(tmp_path / "one", tmp_path / "lib", quiet=True, tokenizer=spec, workers=1) == counts
    for name in ("train.bin", "val.bin"):  # threads change nothing in the output
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()
    for split, texts in (("train", train), ("val", val)):
        docs = split_documents(tmp_path / "out" / f"{split}.bin", enc.eot_token)
        assert [enc.decode(d[:-1]) for d in docs] == texts  # file by file, in order, nothing else
        assert counts[split] == sum(map(len, docs))
    assert read_tokens(tmp_path / "out" / "train.bin")[1] == enc.n_vocab


def test_a_bpe_tokenizer_encodes_each_file_then_end_of_text(tmp_path):
    enc = tiny_encoding()
    check_bpe(tmp_path, enc, enc)


def test_gpt2_tokens_of_the_same_files(tmp_path):
    enc = gpt2_or_skip()
    check_bpe(tmp_path, enc, "tiktoken:gpt2")
