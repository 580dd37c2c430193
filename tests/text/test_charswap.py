"""CharSwap yields an out-of-vocabulary word that differs from the original only by an
adjacent internal swap, or by repeating the last character when no swap can."""

import pytest

from advjax_text.translate import charswap, charswap_candidates, internal_swaps


def test_swaps_keep_first_and_last_characters_and_letters():
    for swapped in internal_swaps("robust"):
        assert swapped[0] == "r" and swapped[-1] == "t"
        assert sorted(swapped) == sorted("robust") and swapped != "robust"
    assert internal_swaps("robust") == ["rboust", "roubst", "robsut"]


def test_short_words_have_no_internal_swap():
    assert internal_swaps("cat") == [] and internal_swaps("a") == []


def test_candidates_are_out_of_vocabulary():
    vocab = {"house", "huose"}
    for c in charswap_candidates("house", vocab.__contains__):
        assert c not in vocab
    assert charswap("house", vocab.__contains__) == "hosue"


def test_falls_back_to_repeating_the_last_character():
    vocab = {"cat", "catt"}
    assert charswap("cat", vocab.__contains__) == "cattt"
    assert charswap("eel", {"eel"}.__contains__) == "eell"


def test_every_swap_in_vocabulary_falls_back_to_repeats():
    vocab = {"abcd", "acbd"}
    assert charswap_candidates("abcd", vocab.__contains__) == ["abcdd"]


def test_bad_words_raise():
    with pytest.raises(ValueError, match="empty"):
        charswap("", set().__contains__)
    with pytest.raises(TypeError, match="str"):
        internal_swaps(3)
    with pytest.raises(ValueError, match="stays in the vocabulary"):
        charswap("a", lambda w: True)
