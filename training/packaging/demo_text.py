"""What the demo shows in each language: words with two senses, each sense in two sentences of our
own, and sentence pairs that share a word in the same or in another sense.

The sentences use the word in the middle, never as the last word: at a sentence's end the backward
LSTM has seen only the full stop, and every sentence-final word looks alike to it. spaCy keeps some
words whole with a full stop (Bulgarian "стил."), one more reason to keep the word away from the end.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Sequence, Tuple


class Sense(NamedTuple):
    """One sense of a word: a gloss, and two sentences that use the word, in this exact form, so."""

    gloss: str
    sentences: Tuple[str, str]


class DemoText(NamedTuple):
    """A language's demo: word -> its two senses; sentence pairs for Doc.similarity."""

    senses: Dict[str, Tuple[Sense, Sense]]
    pairs: Sequence[Tuple[str, str]]


ENGLISH = DemoText(
    {
        "bank": (
            Sense(
                "money",
                (
                    "She paid the cheque into her bank account on Monday.",
                    "The bank raised its interest rates again this year.",
                ),
            ),
            Sense(
                "river",
                (
                    "We sat on the bank of the river and watched the boats.",
                    "The river burst its bank after the heavy rain.",
                ),
            ),
        ),
        "play": (
            Sense(
                "games, music",
                (
                    "The children play football in the park every day.",
                    "She will play the piano at the concert tonight.",
                ),
            ),
            Sense(
                "theatre",
                (
                    "The play was performed at a theatre in London.",
                    "Shakespeare wrote the play for his company of actors.",
                ),
            ),
        ),
        "court": (
            Sense(
                "law",
                (
                    "The court ruled against the government in the case.",
                    "The judge told the court that the trial would continue.",
                ),
            ),
            Sense(
                "sport",
                (
                    "They played tennis on a clay court all afternoon.",
                    "The players left the court after the final game.",
                ),
            ),
        ),
        "party": (
            Sense(
                "politics",
                (
                    "The party won the election with a large majority.",
                    "He joined the Labour party as a young man.",
                ),
            ),
            Sense(
                "celebration",
                (
                    "We had a party at her house for her birthday.",
                    "The party lasted until midnight with music and dancing.",
                ),
            ),
        ),
        "state": (
            Sense(
                "country, region",
                (
                    "The state of Texas passed a new law on guns.",
                    "He was elected governor of the state in 1998.",
                ),
            ),
            Sense(
                "condition",
                (
                    "The building was in a poor state after the war.",
                    "The patient remained in a critical state for three days.",
                ),
            ),
        ),
        "plant": (
            Sense(
                "living thing",
                (
                    "The plant needs water and sunlight to grow.",
                    "She put the plant on the window sill in the kitchen.",
                ),
            ),
            Sense(
                "factory",
                (
                    "The car plant employs three thousand workers.",
                    "The power plant was closed in 2010 after an accident.",
                ),
            ),
        ),
    },
    [
        ("The bank raised its interest rates.", "The central bank cut rates again."),
        ("We walked along the bank of the river.", "The bank raised its interest rates."),
        ("She plays the violin in an orchestra.", "He plays the guitar in a band."),
        ("She plays the violin in an orchestra.", "The team plays its last match on Sunday."),
        ("The court ruled against the government.", "The judge adjourned the court."),
        ("The court ruled against the government.", "They played tennis on a clay court."),
    ],
)

# The built-in Bulgarian text (a calendar article and Wikipedia discussions) has these words in both
# senses: страна country / side, ред order / line, стил calendar / writing style.
BULGARIAN = DemoText(
    {
        "страна": (
            Sense(
                "country",
                ("България е малка страна в Европа.", "Франция е голяма страна с богата история."),
            ),
            Sense(
                "side",
                ("От друга страна, статията е твърде кратка.", "Магазинът е на другата страна на улицата."),
            ),
        ),
        "ред": (
            Sense(
                "order",
                (
                    "Имената са подредени по азбучен ред в списъка.",
                    "Статиите в категорията са по азбучен ред на заглавията.",
                ),
            ),
            Sense(
                "line",
                ("Под картинката има само един ред текст и таблица.", "Първият ред на таблицата е празен."),
            ),
        ),
        "стил": (
            Sense(
                "calendar",
                (
                    "В България календарът по нов стил е въведен през 1916 година.",
                    "Датата е дадена по стар стил в документа.",
                ),
            ),
            Sense(
                "writing",
                (
                    "Авторът пише в лек и приятен стил без чуждици.",
                    "Статиите трябва да са в енциклопедичен стил и на български език.",
                ),
            ),
        ),
    },
    [
        ("България е малка страна в Европа.", "Гърция е малка страна на Балканите."),
        ("България е малка страна в Европа.", "От друга страна, статията е твърде кратка."),
        ("Имената са подредени по азбучен ред.", "Статиите в категорията са по азбучен ред."),
        ("Имената са подредени по азбучен ред.", "Под картинката има само един ред текст и таблица."),
        (
            "Статиите трябва да са написани в енциклопедичен стил и на български език.",
            "Авторът пише в лек и приятен стил, без чуждици.",
        ),
        (
            "Статиите трябва да са написани в енциклопедичен стил и на български език.",
            "В България календарът по нов стил е въведен през 1916 година.",
        ),
    ],
)

DEMO_TEXT: Dict[str, DemoText] = {"en": ENGLISH, "bg": BULGARIAN}
