"""Properties of the black-box text attacks on a tiny lexicon classifier (no training):
every query is counted and capped, substitutions come only from the neighbour list and are
never antonyms, the edited-word share never exceeds its budget, outcomes at smaller caps
derived from one trace equal direct re-runs, and the same key replays the same attack."""

import itertools

import jax
import numpy as np
import pytest

from advjax_text.classify import (
    FAMILIES,
    char_attack,
    char_candidates,
    char_edits,
    greedy_attack,
    max_changes,
    textfooler,
    truncate_result,
    word_candidates,
)

POSITIVE = {"good": 2.0, "great": 3.0, "fine": 1.0, "nice": 1.5, "charming": 2.0, "superb": 3.0}
NEGATIVE = {"bad": 2.0, "dull": 2.0, "awful": 3.0, "poor": 1.5, "so-so": 0.4}
NEIGHBORS = {
    "good": ("nice", "fine", "bad", "decent", "so-so"),
    "great": ("superb", "fine", "awful"),
    "charming": ("nice", "delightful"),
    "film": ("movie", "picture"),
    "funny": ("amusing", "comic"),
    "fine": ("so-so", "okay"),
    "nice": ("pleasant", "fine"),
}
ANTONYMS = frozenset({("good", "bad"), ("bad", "good"), ("great", "awful"), ("awful", "great")})
SENTENCES = [
    "a good film",
    "a great and charming film that is funny",
    "the film is good , great , nice and charming",
    "good",
    "a funny film with a fine cast and a good story",
]


def lexicon_logits(texts):
    """(B, 2) logits: [negative mass, positive mass + 0.2] of known words."""
    out = np.zeros((len(texts), 2))
    for i, t in enumerate(texts):
        words = t.lower().split()
        out[i, 0] = sum(NEGATIVE.get(w, 0.0) for w in words)
        out[i, 1] = sum(POSITIVE.get(w, 0.0) for w in words) + 0.2
    return out


class Counting:
    """A logits function that counts the sentences it scores (the ground truth)."""

    def __init__(self):
        self.sentences = 0

    def __call__(self, texts):
        self.sentences += len(texts)
        return lexicon_logits(texts)


def run_tf(sentence, max_queries=200, max_share=1.0, fn=lexicon_logits):
    return textfooler(
        fn,
        sentence,
        1,
        neighbors=NEIGHBORS,
        antonyms=ANTONYMS,
        max_queries=max_queries,
        max_share=max_share,
    )


@pytest.mark.parametrize("sentence", SENTENCES)
@pytest.mark.parametrize("max_queries", [1, 2, 3, 5, 8, 200])
def test_every_query_is_counted_and_capped(sentence, max_queries):
    fn = Counting()
    r = run_tf(sentence, max_queries=max_queries, fn=fn)
    assert r.queries == fn.sentences <= max_queries


def test_substitutions_come_from_neighbours_and_never_antonyms():
    for sentence, share in itertools.product(SENTENCES, (0.1, 0.34, 0.5, 1.0)):
        r = run_tf(sentence, max_share=share)
        for e in r.edits:
            assert e.new in NEIGHBORS[e.old] and (e.old, e.new) not in ANTONYMS
        assert "bad" not in r.perturbed.split() and "awful" not in r.perturbed.split()
    assert word_candidates("good", NEIGHBORS, ANTONYMS) == ["nice", "fine", "decent", "so-so"]
    assert word_candidates("the", {"the": ("a",)}, ANTONYMS) == []  # stopword


def test_changed_share_never_exceeds_budget():
    for sentence, share in itertools.product(SENTENCES, (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)):
        r = run_tf(sentence, max_share=share)
        n = len(sentence.split())
        assert len({e.slot for e in r.edits}) <= max_changes(n, share) <= share * n + 1e-9
        changed = sum(a != b for a, b in zip(sentence.split(), r.perturbed.split()))
        assert changed == len(r.edits)


def test_attack_flips_an_easy_case_and_stops_on_the_query_cap():
    r = run_tf("a good film")
    assert r.stop == "flipped" and r.adv_pred == 0 and r.first_flip_query <= r.queries
    assert run_tf("a great and charming film that is funny", max_queries=3).stop == "query_cap"
    assert run_tf("a good film", max_share=0.3).stop == "share_cap"  # floor(0.9) = 0 edits


def test_clean_wrong_case_costs_one_query():
    r = textfooler(
        lexicon_logits,
        "a bad film",
        1,
        neighbors=NEIGHBORS,
        antonyms=ANTONYMS,
        max_queries=50,
        max_share=0.5,
    )
    assert r.stop == "clean_wrong" and r.queries == 1 and not r.edits


@pytest.mark.parametrize("sentence", SENTENCES)
def test_outcomes_derived_from_one_trace_equal_direct_reruns(sentence):
    full = run_tf(sentence, max_queries=60, max_share=1.0)
    for q, s in itertools.product((1, 2, 3, 4, 5, 7, 9, 12, 20, 60), (0.1, 0.2, 0.3, 0.5, 1.0)):
        derived = truncate_result(full, max_queries=q, max_share=s)
        direct = run_tf(sentence, max_queries=q, max_share=s)
        assert (derived.stop, derived.queries) == (direct.stop, direct.queries), (q, s)
        assert derived.broken == (direct.stop == "flipped")
    with pytest.raises(ValueError, match="exceed"):
        truncate_result(full, max_queries=61, max_share=1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_queries=0, max_share=0.2),
        dict(max_queries=10, max_share=0.0),
        dict(max_queries=10, max_share=1.5),
        dict(max_queries=2.5, max_share=0.2),
    ],
)
def test_budgets_out_of_range_raise(kwargs):
    with pytest.raises(ValueError, match="max_"):
        textfooler(
            lexicon_logits, "a good film", 1, neighbors=NEIGHBORS, antonyms=ANTONYMS, **kwargs
        )


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="empty"):
        run_tf("   ")
    with pytest.raises(ValueError, match="candidate lists"):
        greedy_attack(lexicon_logits, ["a", "b"], 1, [[]], max_queries=5, max_share=0.5)
    with pytest.raises(ValueError, match="family"):
        char_edits("good", "unicode_magic")
    with pytest.raises(ValueError, match="families"):
        char_candidates("good", key=jax.random.key(0), families=("nope",))


def test_char_edits_are_of_their_family():
    assert char_edits("bad", "spacing") == ["b ad", "ba d"]
    assert all("\u200b" in e for e in char_edits("good", "zero_width"))
    assert char_edits("good", "homoglyph")[0] == "g\u043eod"
    assert char_edits("a", "charswap") == []
    assert set(char_candidates("charming", key=jax.random.key(0))) <= {
        e for f in FAMILIES for e in char_edits("charming", f)
    }


def test_same_key_same_char_attack_and_queries_counted():
    key = jax.random.key(3)
    runs = []
    for _ in range(2):
        fn = Counting()
        r = char_attack(fn, SENTENCES[2], 1, key=key, max_queries=100, max_share=0.5)
        assert r.queries == fn.sentences
        runs.append(r)
    assert runs[0] == runs[1]
    assert runs[0].stop in ("flipped", "share_cap", "exhausted")
