import random
import re
import string

import pytest

from madara_cli.agents.generator import clean_answer, fever_label
from madara_cli.core.metrics import METRICS, aggregate, contains_match, exact_match, metric_name, normalize, score, tidy_answer, token_f1


def test_normalisation_follows_squad_and_paper():
    assert normalize("  The  Eiffel Tower. ") == "eiffel tower"
    assert normalize("The  Eiffel Tower.", strict=True) == "the eiffel tower."


def test_em_against_every_alias():
    assert exact_match("yuri gagarin", ["Gagarin", "Yuri Gagarin"])
    assert not exact_match("Gagarin was first", ["Gagarin"])
    assert not exact_match("Paris", [])


def test_em_is_the_authors_squad_match_and_em_strict_the_literal_one():
    # The authors' metrics.py: lower-case, punctuation and articles dropped, whitespace.
    assert exact_match("The Eiffel Tower", ["eiffel tower."])
    assert exact_match("1969", ["1,969"])
    assert exact_match("U.S.", ["US"])
    # Section 5.4's literal words: lower-casing and whitespace only.
    assert exact_match("  The   Eiffel  tower ", ["the eiffel Tower"], strict=True)
    assert not exact_match("Eiffel Tower", ["The Eiffel Tower"], strict=True)
    assert not exact_match("U.S.", ["US"], strict=True)
    s = score("Eiffel Tower", ["The Eiffel Tower"])
    assert (s.em, s.em_strict, s.f1, s.contains) == (1.0, 0.0, 1.0, 1.0)


def _authors_normalize(text: str) -> str:
    # The reference implementation's normalize_answer, restated from its behaviour.
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def test_em_agrees_with_the_authors_code_on_random_answers_and_edge_cases():
    # Answers the clean-up leaves alone (no lead-in, no wrapping marks, no final period)
    # score exactly as the authors' exact_match scores them.
    rng = random.Random(0)
    alphabet = list("abcdeAE ,-'’é") + ["the ", "an ", "A ", "1", "Ü"]
    for _ in range(3000):
        pred = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        gold = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        if tidy_answer(pred) != pred.strip() or tidy_answer(gold) != gold.strip():
            continue
        assert exact_match(pred, [gold]) == (_authors_normalize(pred) == _authors_normalize(gold)), (pred, gold)
    # Empty strings and answers that are nothing but an article or punctuation.
    assert exact_match("", [""]) and exact_match("the", [""]) and exact_match("!?", ["an"])
    assert not exact_match("", ["Paris"]) and not exact_match("Paris", [""])


def test_f1_and_contains():
    assert token_f1("Yuri Gagarin", ["Gagarin"]) == 2 * (0.5 * 1) / 1.5
    assert token_f1("", [""]) == 1.0
    assert contains_match("It was Yuri Gagarin.", ["gagarin"])
    assert not contains_match("Gagarinovich", ["gagarin"])


def test_aggregate_is_mean_fraction():
    agg = aggregate([score("Paris", ["paris"]), score("Lyon", ["Paris"])])
    assert agg == {"n": 2, "em": 0.5, "em_strict": 0.5, "f1": 0.5, "contains": 0.5}
    assert aggregate([score("the Paris", ["Paris"])]) == {"n": 1, "em": 1.0, "em_strict": 0.0, "f1": 1.0, "contains": 1.0}


def test_metric_names_and_the_old_alias():
    assert METRICS == ("em", "em_strict", "f1", "contains")
    assert metric_name("em_squad") == "em" and metric_name("em_strict") == "em_strict"
    with pytest.raises(ValueError, match="valid: em, em_strict, f1, contains"):
        metric_name("accuracy")


# --- the clean-up cannot turn a right answer wrong ------------------------------------------


@pytest.mark.parametrize("gold", ["Washington, D.C.", "Martin Luther King Jr.", "Paris (France)", "A-ha", "\"Weird Al\" Yankovic",
                                  "(What's the Story) Morning Glory?", "*NSYNC", "The Answer", "U.S."])
def test_a_verbatim_reply_scores_one_under_every_em(gold):
    answer = clean_answer(gold)
    s = score(answer, [gold])
    assert (s.em, s.em_strict, s.f1, s.contains) == (1.0, 1.0, 1.0, 1.0), (gold, answer)


def test_cleanup_strips_frames_but_keeps_the_answer_intact():
    assert clean_answer("Answer: \"Paris\".\nBecause...") == "Paris"
    assert clean_answer("**Warsaw**") == "Warsaw"
    assert clean_answer("Answer:\nParis") == "Paris"
    assert clean_answer("The answer is Paris.") == "Paris"
    assert clean_answer("(Paris)") == "Paris" and clean_answer("[1969]") == "1969"
    # Brackets only in matching pairs; no bare-article prefix rule.
    assert clean_answer("Paris (France)") == "Paris (France)"
    assert clean_answer("(a) and (b)") == "(a) and (b)"
    assert clean_answer("A-ha") == "A-ha"
    assert clean_answer("Answer-ready") == "Answer-ready"
    # The final period goes from both sides, so the strict match still holds.
    assert clean_answer("Washington, D.C.") == "Washington, D.C"
    assert score("Washington, D.C", ["Washington, D.C."]).em_strict == 1.0


@pytest.mark.parametrize("text", ["Answer: \"Paris\".\nBecause", "**Warsaw.**", "Final answer: (1969)", "“Paris”.", "A-ha", "", "  .  "])
def test_cleanup_is_idempotent(text):
    once = tidy_answer(text)
    assert tidy_answer(once) == once and clean_answer(once) == once


@pytest.mark.parametrize("reply,label", [
    ("SUPPORTS", "SUPPORTS"),
    ("REFUTES", "REFUTES"),
    ("The claim is true.", "SUPPORTS"),
    ("The claim is not supported by the documents. REFUTES", "REFUTES"),
    ("Label: REFUTES\nThe claim is true in part.", "REFUTES"),
    ("**Label:** SUPPORTS", "SUPPORTS"),
    ("REFUTES. It is not true.", "REFUTES"),
    ("The documents don't support it; the claim is false.", "REFUTES"),
    ("Answer: \"SUPPORTS\"", "SUPPORTS"),
])
def test_fever_reads_the_label_the_reply_commits_to(reply, label):
    assert fever_label(reply) == label and clean_answer(reply, "fever") == label


def test_fever_reply_without_a_committed_label_keeps_its_text():
    for reply in ("I am not sure", "The documents neither support nor refute it", "The evidence doesn't support the claim"):
        assert fever_label(reply) is None
        assert clean_answer(reply, "fever") == reply
        assert score(clean_answer(reply, "fever"), ["SUPPORTS"]).em == 0.0
