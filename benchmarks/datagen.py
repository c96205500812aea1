"""Generated, cached benchmark inputs.

Why: a word-count benchmark needs hundreds of megabytes of text with a realistic word
distribution; shipping it is out of the question and generating it word by word in Python
would take longer than the benchmark. NumPy draws Zipf-distributed word ranks over a fixed
seeded vocabulary in bulk; the file is written once per (size, seed) under
`benchmarks/.data/` and reused by later runs. NumPy is needed only here, not by Ember.
"""
from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / ".data"

VOCABULARY_SIZE = 50_000
ZIPF_EXPONENT = 1.15
WORDS_PER_LINE = (10, 15)  # inclusive range
_FORMAT = 1  # bump when the generator changes, so cached files are not reused
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _vocabulary(rng) -> list[str]:
    """VOCABULARY_SIZE distinct lowercase pseudo-words, shortest first.

    Rank r of the Zipf draw picks word r, so frequent words are short, as in real text.
    """
    words: set[str] = set()
    while len(words) < VOCABULARY_SIZE:
        lengths = rng.integers(2, 11, size=VOCABULARY_SIZE)
        letters = rng.integers(0, len(_LETTERS), size=int(lengths.sum()))
        flat = "".join(_LETTERS[i] for i in letters.tolist())
        ends = lengths.cumsum().tolist()
        starts = [0] + ends[:-1]
        for a, b in zip(starts, ends):
            words.add(flat[a:b])
            if len(words) == VOCABULARY_SIZE:
                break
    shuffled = [str(w) for w in rng.permutation(sorted(words))]
    return sorted(shuffled, key=len)  # stable: random order within a length


def zipf_text(size_bytes: int, seed: int = 42) -> Path:
    """Path of a text file of at least `size_bytes` bytes (whole lines), created if missing.

    Lines hold 10 to 15 words separated by single spaces; word ranks follow a Zipf law.
    The same (size, seed) always yields the same bytes.
    """
    import numpy as np  # benchmarks-only dependency

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / f"zipf-v{_FORMAT}-{size_bytes}-seed{seed}.txt"
    if path.exists():
        return path

    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    # All words, each followed by one space, in one byte buffer; text is produced by
    # gathering whole words out of it with vectorized index arithmetic.
    flat = np.frombuffer("".join(w + " " for w in vocab).encode("ascii"), dtype=np.uint8)
    word_len = np.array([len(w) + 1 for w in vocab], dtype=np.int64)
    word_start = np.concatenate(([0], np.cumsum(word_len)[:-1]))
    newline = ord("\n")
    # Truncated Zipf law over the vocabulary, sampled by inverting its CDF (numpy's own
    # zipf() is unbounded and several times slower for exponents close to 1).
    weights = np.arange(1, VOCABULARY_SIZE + 1, dtype=np.float64) ** -ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]

    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    written = 0
    chunk_words = max(10_000, min(2_000_000, size_bytes // 4))
    lo, hi = WORDS_PER_LINE
    with open(tmp, "wb") as out:
        while written < size_bytes:
            ranks = np.searchsorted(cdf, rng.random(chunk_words), side="right")
            np.minimum(ranks, VOCABULARY_SIZE - 1, out=ranks)
            line_lengths = rng.integers(lo, hi + 1, size=len(ranks) // lo + 1)
            line_ends = np.cumsum(line_lengths)
            line_ends = line_ends[line_ends <= len(ranks)]
            ranks = ranks[: int(line_ends[-1])]
            lengths = word_len[ranks]
            ends = np.cumsum(lengths)
            total = int(ends[-1])
            gather = np.repeat(word_start[ranks] - (ends - lengths), lengths)
            gather += np.arange(total, dtype=np.int64)
            buf = flat[gather]
            buf[ends[line_ends - 1] - 1] = newline  # the space after a line's last word
            data = buf.tobytes()
            remaining = size_bytes - written
            if len(data) > remaining:  # stop at the first line end past the target size
                cut = data.find(b"\n", remaining - 1)
                data = data[: cut + 1] if cut >= 0 else data
            out.write(data)
            written += len(data)
    os.replace(tmp, path)
    return path
