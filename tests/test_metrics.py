from madara_cli.agents.generator import clean_answer
from madara_cli.metrics import aggregate, contains_match, exact_match, normalize, score, token_f1


def test_normalisation_follows_squad_and_paper():
    assert normalize("  The  Eiffel Tower. ") == "eiffel tower"
    assert normalize("The  Eiffel Tower.", strict=True) == "the eiffel tower."


def test_em_against_every_alias():
    assert exact_match("yuri gagarin", ["Gagarin", "Yuri Gagarin"])
    assert not exact_match("Gagarin was first", ["Gagarin"])


def test_em_is_the_papers_strict_match_and_em_squad_the_lenient_one():
    # Section 5.4: lower-casing and whitespace only; punctuation and articles count.
    assert exact_match("  The   Eiffel  tower ", ["the eiffel Tower"])
    assert not exact_match("Eiffel Tower", ["The Eiffel Tower"])
    assert not exact_match("U.S.", ["US"])
    assert exact_match("Eiffel Tower", ["The Eiffel Tower"], squad=True)
    assert exact_match("U.S.", ["US"], squad=True)
    s = score("Eiffel Tower", ["The Eiffel Tower"])
    assert (s.em, s.em_squad, s.f1, s.contains) == (0.0, 1.0, 1.0, 1.0)


def test_f1_and_contains():
    assert token_f1("Yuri Gagarin", ["Gagarin"]) == 2 * (0.5 * 1) / 1.5
    assert token_f1("", [""]) == 1.0
    assert contains_match("It was Yuri Gagarin.", ["gagarin"])
    assert not contains_match("Gagarinovich", ["gagarin"])


def test_aggregate_is_mean_fraction():
    agg = aggregate([score("Paris", ["paris"]), score("Lyon", ["Paris"])])
    assert agg == {"n": 2, "em": 0.5, "em_squad": 0.5, "f1": 0.5, "contains": 0.5}
    assert aggregate([score("the Paris", ["Paris"])]) == {"n": 1, "em": 0.0, "em_squad": 1.0, "f1": 1.0, "contains": 1.0}


def test_answer_cleanup_is_shared_and_documented():
    assert clean_answer("Answer: \"Paris\".\nBecause...") == "Paris"
    assert clean_answer("**Warsaw**") == "Warsaw"
    assert clean_answer("The claim is true.", "fever") == "SUPPORTS"
    assert clean_answer("REFUTES", "fever") == "REFUTES"
    assert clean_answer("I am not sure", "fever") == "I am not sure"
