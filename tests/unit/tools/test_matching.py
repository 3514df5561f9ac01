"""The match scorer: normalisation, synonyms, stemming, weighted overlap and the tie-breaks."""

from __future__ import annotations

import pytest

from opslake.tools.matching import (
    COVERAGE_WEIGHT,
    PHRASE_WEIGHT,
    Candidate,
    need_terms,
    rank,
    score,
    stem,
    terms,
)


@pytest.mark.parametrize(
    ("word", "expected"),
    [("welding", "weld"), ("welder", "weld"), ("welders", "weld"), ("welds", "weld"), ("wiring", "wir"),
     ("wire", "wir"), ("planning", "plan"), ("stainless", "stainless"), ("hvac", "hvac")],
)  # fmt: skip
def test_stem_is_light_and_symmetric(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_terms_drop_stopwords_and_duplicates_and_keep_order() -> None:
    assert terms("Need a Welder who is experienced with welding, TIG welding please") == ["weld", "tig"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GTAW", ["tig"]),
        ("gas tungsten arc welding", ["tig", "weld"]),
        ("GMAW and SMAW", ["mig", "stick"]),
        ("programmable logic controllers", ["plc"]),
        ("lift truck driver", ["forklift", "driv"]),
        ("G-code", ["gcode"]),
        ("AWS D1.1", ["aws", "d1.1"]),
    ],
)
def test_synonyms_map_to_the_vocabulary_words(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


def test_need_with_only_stopwords_has_no_terms() -> None:
    assert need_terms("someone good with the skills, please!") == []


def test_score_is_weighted_coverage_plus_whole_phrases_and_explains_itself() -> None:
    worker = Candidate("W00001", ["tig welding", "grinding"], ["aws d1.1"], 4.0)
    match = score(worker, terms("TIG welding, AWS D1.1, pipe"))
    # 4 of 5 terms covered (tig, weld, aws, d1.1; not pip); two phrases named in full.
    assert match.score == round(COVERAGE_WEIGHT * 4 / 5 + PHRASE_WEIGHT * 2 / 4, 4)
    assert match.matched_terms == ["tig", "weld", "aws", "d1.1"]
    assert match.matched_skills == ["tig welding"]
    assert match.matched_certifications == ["aws d1.1"]


def test_no_overlap_scores_zero() -> None:
    match = score(Candidate("W00001", ["forklift"], [], 5.0), terms("HVAC refrigeration"))
    assert (match.score, match.matched_terms, match.matched_skills) == (0.0, [], [])


def test_rank_orders_by_score_then_rating_then_id_and_truncates() -> None:
    candidates = [
        Candidate("W00003", ["mig welding"], [], 5.0),
        Candidate("W00002", ["tig welding", "pipe welding"], ["aws d1.1"], 3.0),
        Candidate("W00004", ["tig welding"], [], 4.5),
        Candidate("W00001", ["tig welding"], [], 4.5),
        Candidate("W00005", ["forklift"], [], 5.0),
    ]
    ranked = rank(candidates, "tig pipe welding, aws d1.1", count=4)
    assert [m.worker_id for m in ranked] == ["W00002", "W00001", "W00004", "W00003"]
    assert ranked[0].score > ranked[1].score == ranked[2].score > ranked[3].score > 0


def test_rank_is_deterministic_whatever_the_input_order() -> None:
    candidates = [
        Candidate(f"W{i:05d}", ["tig welding", "grinding"][: 1 + i % 2], [], 3.0 + i % 3) for i in range(40)
    ]
    first = rank(candidates, "tig welding and grinding", 10)
    second = rank(list(reversed(candidates)), "tig welding and grinding", 10)
    assert first == second
