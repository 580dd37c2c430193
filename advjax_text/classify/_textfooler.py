"""TextFooler-style black-box word substitution (Jin et al., AAAI 2020).

Words are ranked by the drop of the true-class probability when each is deleted (score
queries only, no gradients); stopwords are never touched; each word in that order is tried
with its counter-fitted neighbours (Mrkšić et al. 2016), antonyms excluded, keeping the one
that lowers the true-class probability most, until the label flips or a budget runs out.
The search itself is `advjax_text.classify.greedy_attack`. Pure: no I/O.

Differences from the paper, declared: no sentence-encoder (USE) or part-of-speech filter
during the search (no encoder is available offline); the similarity floor is checked
afterwards, per case, by `advjax_text`, and a case that breaks it is `invalid`.
"""

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from advjax_text.classify._greedy import GreedyResult, greedy_attack

STOPWORDS = frozenset(
    """a about above across after afterwards again against ain all almost alone along already
    also although am among amongst an and another any anyhow anyone anything anyway anywhere
    are aren aren't around as at back be became because become becomes becoming been before
    beforehand behind being below beside besides between beyond both but by can cannot could
    couldn couldn't d didn didn't do does doesn doesn't doing don don't done down due during
    either else elsewhere empty enough even ever everyone everything everywhere except first
    for former formerly from hadn hadn't hasn hasn't haven haven't he hence her here hereafter
    hereby herein hereupon hers herself him himself his how however hundred i if in indeed
    into is isn isn't it it's its itself just latter latterly least ll may me meanwhile mightn
    mightn't mine more moreover most mostly must mustn mustn't my myself namely needn needn't
    neither never nevertheless next no nobody none noone nor not nothing now nowhere o of off
    on once one only onto or other others otherwise our ours ourselves out over per please s
    same shan shan't she she's should've shouldn shouldn't somehow something sometime
    somewhere such t than that that'll the their theirs them themselves then thence there
    thereafter thereby therefore therein thereupon these they this those through throughout
    thru thus to too toward towards under unless until up upon used ve was wasn wasn't we were
    weren weren't what whatever when whence whenever where whereafter whereas whereby wherein
    whereupon wherever whether which while whither who whoever whole whom whose why with
    within without won won't would wouldn wouldn't y yet you you'd you'll you're you've your
    yours yourself yourselves 's 're n't 'm 'd 'll 've""".split()
)
"""Words never substituted: function words and negations (the list of TextFooler's code)."""


def word_candidates(
    word: str,
    neighbors: Mapping[str, Sequence[str]],
    antonyms: frozenset[tuple[str, str]],
    *,
    stopwords: frozenset[str] = STOPWORDS,
) -> list[str]:
    """The allowed replacements of `word`: its neighbours, minus antonyms, itself, stopwords.

    Example:
      >>> word_candidates("good", {"good": ("nice", "bad")}, frozenset({("good", "bad")}))
      ['nice']
    """
    w = word.lower()
    if w in stopwords or not any(ch.isalpha() for ch in w):
        return []
    return [
        n for n in neighbors.get(w, ()) if n != w and (w, n) not in antonyms and n not in stopwords
    ]


def textfooler(
    logits_fn: Callable[[Sequence[str]], np.ndarray],
    sentence: str,
    label: int,
    *,
    neighbors: Mapping[str, Sequence[str]],
    antonyms: frozenset[tuple[str, str]],
    max_queries: int,
    max_share: float,
    stopwords: frozenset[str] = STOPWORDS,
) -> GreedyResult:
    """Attack one sentence with counter-fitted word substitutions under declared budgets.

    Args:
      logits_fn: black-box scorer, sentences -> (B, C) logits; every sentence is a query.
      sentence: whitespace-tokenised sentence.
      label: its true class.
      neighbors: word -> counter-fitted neighbours (`advjax_text.data.load_neighbors`).
      antonyms: symmetric (word, antonym) pairs (`load_antonyms`), never substituted.
      max_queries: query cap per case, >= 1.
      max_share: most words changed, as a share of the sentence's words, in (0, 1].
      stopwords: words never substituted.

    Returns:
      The search's `GreedyResult` (trace, queries, perturbed sentence).

    Raises:
      ValueError: bad budgets or an empty sentence.

    Example:
      >>> r = textfooler(logits_fn, "a charming journey .", 1, neighbors=nb, antonyms=ant,
      ...                max_queries=500, max_share=0.2)
    """
    words = sentence.split()
    candidates = [word_candidates(w, neighbors, antonyms, stopwords=stopwords) for w in words]
    return greedy_attack(
        logits_fn, words, label, candidates, max_queries=max_queries, max_share=max_share
    )
