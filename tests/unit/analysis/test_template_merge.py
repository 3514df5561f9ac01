"""Merging templates that differ only in word positions (opslake.analysis.template_merge): what
merges, what the rules refuse so that purity holds, and which id a merged signature keeps."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest

from opslake.analysis.masking import signature_id, template_of
from opslake.analysis.template_merge import (
    WILDCARD,
    Candidate,
    Merge,
    MergeRules,
    matches,
    merge_candidates,
    tokens,
)

pytestmark = pytest.mark.unit
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def candidates(
    texts: list[str], endpoint: str = "tool:stock", error_type: str | None = "OutOfStock"
) -> list[Candidate]:
    """One new candidate per error text (masked as the analyzer masks it), first seen in order."""
    found = []
    for i, text in enumerate(texts):
        template = template_of(endpoint, error_type, text)
        found.append(
            Candidate(signature_id(template), endpoint, error_type, template, T0 + timedelta(minutes=i))
        )
    return found


def groups(merges: list[Merge]) -> set[str]:
    return {m.template.split(" | ", 2)[2] for m in merges}


def test_word_variants_in_one_context_become_one_signature_with_a_placeholder() -> None:
    found = candidates([f"no stock of blue sneakers in {city} (sku SKU-1{i}4)" for i, city in
                        enumerate(["Lyon", "Paris", "Nice", "Lille"])])  # fmt: skip
    (merge,) = merge_candidates(found)
    assert merge.template == "tool:stock | OutOfStock | no stock of blue sneakers in <*> (sku <id>)"
    assert merge.signature_id == found[0].signature_id  # the earliest seen keeps its id
    assert set(merge.candidates) == {c.signature_id for c in found}
    assert {raw for raw, _ in merge.raws} == {c.signature_id for c in found}


def test_two_adjacent_words_that_vary_together_merge_as_one_value() -> None:
    """A person's first and last name (the second world's close_ticket error, one signature per
    customer before): three names or more in one context fold; a name whose first word stays
    (Felix Becker, Felix Braun) is no pair varying together, and two names are not enough."""
    names = ["Felix Becker", "Sofia Rossi", "Maria Lopez", "Priya Sharma"]
    texts = [
        f"cannot close ticket TCK-1{i}0 of {n}: add a resolution comment first" for i, n in enumerate(names)
    ]
    (merge,) = merge_candidates(candidates(texts, "tool:close_ticket", "tool_error_result"))
    assert merge.template.endswith("cannot close ticket <id> of <*> <*>: add a resolution comment first")
    assert merge_candidates(candidates(texts[:2], "tool:close_ticket", "tool_error_result")) == []
    same_first = [t.replace(n, f"Felix {n.split()[1]}") for t, n in zip(texts, names, strict=True)]
    assert all(
        len(m.candidates) < 4 or "Felix <*>" in m.template
        for m in merge_candidates(candidates(same_first, "tool:close_ticket", "tool_error_result"))
    )


def test_two_values_in_one_context_are_not_enough() -> None:
    assert (
        merge_candidates(
            candidates(["no stock of blue sneakers in Lyon", "no stock of blue sneakers in Paris"])
        )
        == []
    )


def test_keywords_before_a_name_never_merge_column_and_table_stay_apart() -> None:
    """ "column <*> does not exist" and "table <*> does not exist" are different causes: the word
    before a value is its name (a keyword), and columns and tables do not share names, so the
    keyword never varies in several contexts either, however many keywords there are."""
    texts = [
        f"{kind} {name} does not exist (line {n})"
        for kind, names in (("column", ["salry", "ratng", "skillz"]), ("table", ["workerz", "jobz", "staff"]),
                            ("view", ["v_old", "v_tmp", "v_x"]))
        for n, name in enumerate(names, start=1)
    ]  # fmt: skip
    merges = merge_candidates(candidates(texts, "/sql", "sql_error"))
    assert groups(merges) == {
        "column <*> does not exist (line <num>)",
        "table <*> does not exist (line <num>)",
        "view <*> does not exist (line <num>)",
    }
    quoted = [
        f"{kind} '{name}' does not exist" for kind in ("column", "table", "view") for name in ("a", "b")
    ]
    assert merge_candidates(candidates(quoted, "/sql", "sql_error")) == []  # "column <str>": a keyword


def test_a_two_valued_word_merges_when_it_varies_in_three_contexts() -> None:
    """blue/black recur with the same other words in Lyon, Paris and Nice: a variable. In two
    contexts only (a 2 x 2 cross product) the evidence is not enough."""
    three = [f"no stock of {c} sneakers in {city}" for c, city in itertools.product(["blue", "black"],
                                                                                    ["Lyon", "Paris", "Nice"])]  # fmt: skip
    assert groups(merge_candidates(candidates(three))) == {"no stock of <*> sneakers in <*>"}
    two = [
        f"no stock of {c} sneakers in {city}"
        for c, city in itertools.product(["blue", "black"], ["Lyon", "Paris"])
    ]
    assert merge_candidates(candidates(two)) == []


def test_colour_product_and_city_merge_together_even_when_sparse() -> None:
    rng = random.Random(3)
    combos = list(
        itertools.product(["blue", "black"], ["sneakers", "boots", "sandals"], ["Lyon", "Paris", "Nice"])
    )
    texts = [f"no stock of {c} {p} in {city}" for c, p, city in rng.sample(combos, 14)]
    assert groups(merge_candidates(candidates(texts))) == {"no stock of <*> <*> in <*>"}


def test_what_never_merges_endpoints_error_types_lengths_and_few_constants() -> None:
    cities = ["Lyon", "Paris", "Nice", "Lille"]
    mixed = [
        *candidates([f"no stock in {c}" for c in cities[:2]], "tool:a"),
        *candidates([f"no stock in {c}" for c in cities[2:]], "tool:b"),
        *candidates([f"no stock in {c}" for c in cities[:2]], "tool:a", "Other"),
    ]
    assert merge_candidates(mixed) == []  # never across endpoints or error types
    assert (
        merge_candidates(candidates(["no stock in Lyon", "no stock in Paris", "no stock in Le Havre"])) == []
    )
    assert (
        merge_candidates(candidates([f"removing {s}" for s in ("chargen", "daytime", "echo", "time")])) == []
    )
    # variables may not outnumber the constants ("a few word positions"): 27 texts, 3 groups
    merges = merge_candidates(candidates([f"{a} {b} {c} failed" for a, b, c in
                                          itertools.product("xyz", "pqr", "uvw")]))  # fmt: skip
    assert len(merges) == 3 and all(m.template.count(WILDCARD) == 2 for m in merges)


def test_positions_that_masking_already_marked_variable_need_two_values() -> None:
    texts = ["task 0x1f failed on node alpha", "task 12 failed on node alpha"]  # <hex> and <num>
    assert groups(merge_candidates(candidates(texts))) == {"task <*> failed on node alpha"}


def test_a_variable_keeps_the_punctuation_its_values_share() -> None:
    texts = [f"authentication failure; tty=ssh user={u}" for u in ("root", "git", "ftp")]
    assert groups(merge_candidates(candidates(texts))) == {"authentication failure; tty=ssh user=<*>"}
    words = [f"no stock of {p} in Lyon today" for p in ("sneakers", "sandals", "slippers")]
    assert groups(merge_candidates(candidates(words))) == {"no stock of <*> in Lyon today"}  # never "s<*>"
    assert matches(tokens("user=<*> now"), tokens("user=bob now"))
    assert not matches(tokens("user=<*> now"), tokens("uid=0 now"))


def test_the_masking_list_is_one_token() -> None:
    assert tokens("ids [<num>, ...] of <*>") == ("ids", "[<num>, ...]", "of", "<*>")


def test_a_new_variant_joins_the_merged_signature_it_fits_and_keeps_its_id() -> None:
    """A diagnosed signature keeps its id when a variant joins, whatever the new id sorts as; one
    new variant needs no new evidence to join a merged template it fits."""
    merged = "tool:stock | OutOfStock | no stock of blue sneakers in <*>"
    raws = tuple((signature_id(template_of("tool:stock", "OutOfStock", f"no stock of blue sneakers in {c}")),
                  template_of("tool:stock", "OutOfStock", f"no stock of blue sneakers in {c}"))
                 for c in ("Lyon", "Paris", "Nice"))  # fmt: skip
    known = Candidate(
        "sig_ffffffffffffffff", "tool:stock", "OutOfStock", merged, T0, raws, known=True, diagnosed=True
    )
    (late,) = candidates(["no stock of blue sneakers in Lille"])
    late = Candidate(
        "sig_0000000000000000", late.endpoint, late.error_type, late.template, T0 - timedelta(days=1)
    )
    (merge,) = merge_candidates([known, late])
    assert merge.signature_id == "sig_ffffffffffffffff" and merge.template == merged
    assert merge.candidates == ("sig_ffffffffffffffff", "sig_0000000000000000")
    assert len(merge.raws) == 4


def test_which_member_keeps_the_id() -> None:
    texts = [f"no stock of blue sneakers in {c}" for c in ("Lyon", "Paris", "Nice")]
    a, b, c = candidates(texts)
    older_new = Candidate(a.signature_id, a.endpoint, a.error_type, a.template, T0 - timedelta(days=9))
    known = Candidate(b.signature_id, b.endpoint, b.error_type, b.template, b.first_seen, known=True)
    diagnosed = Candidate(c.signature_id, c.endpoint, c.error_type, c.template, c.first_seen, known=True,
                          diagnosed=True)  # fmt: skip
    assert merge_candidates([older_new, known, c])[0].signature_id == known.signature_id  # known first
    assert merge_candidates([older_new, known, diagnosed])[0].signature_id == diagnosed.signature_id
    assert merge_candidates([older_new, b, c])[0].signature_id == older_new.signature_id  # then earliest


def test_the_result_does_not_depend_on_the_order_of_the_candidates() -> None:
    rng = random.Random(11)
    texts = [f"no {r} available in {c} for {d}" for r, c, d in itertools.product(
        ["welder", "plumber", "roofer"], ["Lyon", "Paris", "Nice"], ["2025-01-02", "2025-02-03"])]  # fmt: skip
    texts += [f"column {n} does not exist" for n in ("a1", "bb", "cc", "dd")]
    found = candidates(texts, "/match", "not_found")
    first = merge_candidates(found)
    for _ in range(5):
        rng.shuffle(found)
        assert merge_candidates(found) == first
    assert groups(first) == {"no <*> available in <*> for <date>", "column <*> does not exist"}


def test_rules_are_parameters_and_a_template_never_outgrows_the_limit() -> None:
    texts = [f"no stock of blue sneakers in {c}" for c in ("Lyon", "Paris")]
    assert groups(merge_candidates(candidates(texts), MergeRules(min_word_values=2))) == {
        "no stock of blue sneakers in <*>"
    }
    found = candidates([f"no stock in {c} now" for c in ("ab", "cd", "ef")])
    longest = max(len(c.template) for c in found)  # "<*>" is one character longer than each value
    assert merge_candidates(found, MergeRules(max_template_chars=longest + 1)) != []
    assert merge_candidates(found, MergeRules(max_template_chars=longest)) == []


def test_a_merged_template_is_no_markup_to_the_lesson_fence() -> None:
    """A diagnosis or an entry may quote a merged template: its placeholder is no HTML tag."""
    from opslake.analysis.fence import lesson_refusal

    reason = lesson_refusal("Reserve elsewhere: no stock of <*> sneakers in <*> (sku <id>)")
    assert reason is None or "markup" not in reason
    assert "markup" in str(lesson_refusal("Reserve elsewhere: no stock of <b>sneakers</b>"))
