"""lines_to_blocks: edited text cut back into a multimodal message's text blocks."""

from __future__ import annotations

from context_gatekeeper.integration import lines_to_blocks
from context_gatekeeper.records.blocks import MAX_LINE_PAIRS


def test_each_line_goes_back_to_the_block_its_old_line_was_in() -> None:
    blocks = ["Here is my photo from the trip:", "Which cliffs in Ireland are these?"]
    assert lines_to_blocks("Here is my photo from the trip:\nWhich cliffs in Iceland are these?", blocks) == [
        "Here is my photo from the trip:", "Which cliffs in Iceland are these?"]
    assert lines_to_blocks("Which cliffs in Iceland are these?", blocks) == [None, "Which cliffs in Iceland are these?"]


def test_a_long_rewritten_run_is_spread_over_its_blocks_in_order_without_comparing_every_pair() -> None:
    """A 400-line log beside an image, rewritten whole (upper-cased): far more line pairs than
    are compared, so its lines are spread over the old lines in proportion, in order; the
    question after the image stays in its block."""
    log = [f"line {n} of the log: retry {n % 7} failed" for n in range(400)]
    assert len(log) * len(log) > MAX_LINE_PAIRS
    pieces = lines_to_blocks("\n".join(line.upper() for line in log) + "\nWhich service failed?",
                             ["\n".join(log), "Which service failed?"])
    assert pieces == ["\n".join(line.upper() for line in log), "Which service failed?"]


def test_the_answer_is_a_new_list_each_time() -> None:
    first = lines_to_blocks("a\nb", ["a", "b"])
    first.append("changed")
    assert lines_to_blocks("a\nb", ["a", "b"]) == ["a", "b"]


def test_a_long_single_line_edited_slightly_stays_in_its_block() -> None:
    """A minified JSON line beside an image, one value changed: compared by the characters the
    two lines share (``quick_ratio``) past :data:`MAX_PAIR_CHARS`, it stays before the image."""
    from context_gatekeeper.records.blocks import MAX_PAIR_CHARS

    blob = '{"items": [' + ", ".join(f'{{"id": {n}, "name": "item {n}"}}' for n in range(800)) + "]}"
    assert len(blob) ** 2 > MAX_PAIR_CHARS
    edited = blob.replace('"item 7"', '"item seven"')
    assert lines_to_blocks(f"{edited}\nWhich item failed?\nThe last one.", [blob, "Which item failed?\nThe first one."]) == [
        edited, "Which item failed?\nThe last one."]
