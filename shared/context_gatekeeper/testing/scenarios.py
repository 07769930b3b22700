"""The Mutable Transcripts paper's three scenarios, written for this project.

Each scenario is a conversation, the corrections a user makes, and what the two
conditions of the paper's study keep:

* condition A (normal chat): each correction is appended as a new user message and
  answered; ``obsolete`` marks the messages a later correction supersedes;
* condition B (mutable transcript): each correction is an edit; ``edits`` gives, per
  instruction, the replacement text for messages by position (``None`` deletes) —
  what an ideal model would return, scripted in the tests and the benchmark.

One copy serves the tests (``tests/test_paper_scenarios.py``), the benchmarks
(``benchmarks/edit_cost.py``, ``benchmarks/deletion_guard.py``) and the transcripts
notebook; it is plain data, handy for checking an editing model of your own:

>>> from context_gatekeeper.testing.scenarios import SCENARIOS
>>> [s.name for s in SCENARIOS][:1]
['retroactive correction']
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str
    base: list[tuple[str, str]]  # (role, content) before any correction
    appended: list[tuple[str, str]]  # condition A: corrections and their answers, appended
    obsolete: set[int]  # condition A: positions (in base + appended) superseded later
    edits: list[tuple[str, dict[int, str | None]]] = field(default_factory=list)  # condition B
    allow_large_deletion: bool = False

    @property
    def condition_a(self) -> list[tuple[str, str]]:
        return self.base + self.appended


RETROACTIVE_CORRECTION = Scenario(
    name="retroactive correction",
    base=[
        ("user", "What was Ireland's GDP in 2021?"),
        (
            "assistant",
            "Ireland's GDP in 2021 was about **504 billion US dollars**, one of the highest per capita in "
            "the world, largely because multinational companies book profits there.",
        ),
        ("user", "What were its largest categories?"),
        (
            "assistant",
            "The largest contributors to Ireland's 2021 GDP were:\n\n"
            "- **Industry** (mostly pharmaceuticals and medical devices), about 40%\n"
            "- **Information and communication** services, about 15%\n"
            "- **Finance and insurance**, about 6%",
        ),
    ],
    appended=[
        ("user", "Sorry, I meant Iceland, not Ireland."),
        (
            "assistant",
            "No problem. Iceland's GDP in 2021 was about **25.6 billion US dollars**. The largest "
            "categories were:\n\n- **Tourism** and related services\n- **Fisheries** and fish processing\n"
            "- **Aluminium smelting**",
        ),
        ("user", "And the year should be 2022, not 2021."),
        (
            "assistant",
            "In 2022 Iceland's GDP was about **27.8 billion US dollars**. The largest categories were:\n\n"
            "- **Tourism**, recovering strongly after the pandemic\n- **Fisheries** and fish processing\n"
            "- **Aluminium smelting**",
        ),
    ],
    obsolete={0, 1, 2, 3, 4, 5},
    edits=[
        (
            "It should be Iceland, not Ireland.",
            {
                0: "What was Iceland's GDP in 2021?",
                1: "Iceland's GDP in 2021 was about **25.6 billion US dollars**.",
                3: "The largest contributors to Iceland's 2021 GDP were:\n\n- **Tourism** and related "
                "services\n- **Fisheries** and fish processing\n- **Aluminium smelting**",
            },
        ),
        (
            "Make the year 2022, not 2021.",
            {
                0: "What was Iceland's GDP in 2022?",
                1: "Iceland's GDP in 2022 was about **27.8 billion US dollars**.",
                3: "The largest contributors to Iceland's 2022 GDP were:\n\n- **Tourism**, recovering "
                "strongly after the pandemic\n- **Fisheries** and fish processing\n- **Aluminium smelting**",
            },
        ),
    ],
)

CONSTRAINT_INJECTION = Scenario(
    name="constraint injection",
    base=[
        ("user", "Plan a 3-day trip to Lisbon for two people in May."),
        (
            "assistant",
            "## Lisbon in 3 days\n\n**Day 1**: Alfama, the castle and a fado dinner (about 120 EUR).\n"
            "**Day 2**: Belém by tram, the monastery and pastéis de nata; an evening in Bairro Alto.\n"
            "**Day 3**: a day trip to Sintra by train, Pena Palace tickets (40 EUR).\n\n"
            "Stay at a 4-star hotel in Chiado, about 180 EUR a night.",
        ),
        ("user", "Which of those need booking in advance?"),
        (
            "assistant",
            "Book ahead:\n\n- the **fado dinner** (weekends fill up)\n- **Pena Palace** timed tickets\n"
            "- the **Chiado hotel**, since May is busy",
        ),
    ],
    appended=[
        ("user", "Our total budget is 500 EUR for everything except flights. Please adjust."),
        (
            "assistant",
            "With 500 EUR in total, change the plan:\n\n- stay in a guesthouse in Graça (about 70 EUR a "
            "night, 210 EUR)\n- replace the fado dinner with a free fado vadio evening at a tasca\n"
            "- keep Sintra but visit the free gardens and only the Moorish Castle (15 EUR each)\n\n"
            "Only the guesthouse needs booking ahead now.",
        ),
    ],
    obsolete={1, 3},
    edits=[
        (
            "From now on our total budget is 500 EUR for everything except flights.",
            {
                0: "Plan a 3-day trip to Lisbon for two people in May, with a total budget of 500 EUR "
                "for everything except flights.",
                1: "## Lisbon in 3 days on 500 EUR\n\n**Day 1**: Alfama and the castle, then a free fado "
                "vadio evening at a tasca.\n**Day 2**: Belém by tram, the monastery and pastéis de nata.\n"
                "**Day 3**: Sintra by train: the free gardens and the Moorish Castle (15 EUR each).\n\n"
                "Stay at a guesthouse in Graça, about 70 EUR a night.",
                3: "Book ahead:\n\n- the **Graça guesthouse**, since May is busy",
            },
        )
    ],
)

CONTEXT_PRUNING = Scenario(
    name="context pruning",
    base=[
        ("user", "Write a Python function that reads a CSV file and returns the average of a column."),
        (
            "assistant",
            "```python\nimport csv\n\ndef column_average(path, column):\n    with open(path, newline='') as f:\n"
            "        values = [float(row[column]) for row in csv.DictReader(f)]\n"
            "    return sum(values) / len(values)\n```",
        ),
        ("user", "Unrelated, but my printer says 'offline' even though it is on Wi-Fi. Any idea?"),
        (
            "assistant",
            "Try removing and re-adding the printer, giving it a fixed IP address in your router, and "
            "turning off the printer's power saving mode, which often drops the connection.",
        ),
        ("user", "I gave it a fixed IP but it still shows offline on my Mac."),
        (
            "assistant",
            "On macOS, open System Settings > Printers, remove it, then add it with its IP address and "
            "the IPP protocol instead of Bonjour; also reset the printing system if it persists.",
        ),
        ("user", "That worked, thanks. Back to the CSV function: what if the column has empty cells?"),
        (
            "assistant",
            "Skip empty cells before converting:\n\n```python\nvalues = [float(row[column]) for row in "
            "csv.DictReader(f) if row[column].strip()]\n```",
        ),
    ],
    appended=[
        ("user", "Please ignore the printer discussion above; it is not related to the code."),
        ("assistant", "Understood, I will ignore the printer messages and focus on the CSV function."),
    ],
    obsolete={2, 3, 4, 5},
    edits=[
        (
            "Remove the detour about the printer; keep everything about the CSV function.",
            {2: None, 3: None, 4: None, 5: None, 6: "What if the column has empty cells?"},
        )
    ],
    allow_large_deletion=True,
)

SCENARIOS = [RETROACTIVE_CORRECTION, CONSTRAINT_INJECTION, CONTEXT_PRUNING]
