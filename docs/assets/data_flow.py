"""Writes data-flow.svg, the diagram of docs/how-it-works.md: python docs/assets/data_flow.py

Plain SVG with system fonts and no script, so the site shows it offline. Edit the rows below and
rerun; commit both files.
"""

from html import escape
from pathlib import Path

WIDTH = 780
LEFT, RIGHT = 128, 548  # the boxes' column; stage labels left of it, shapes and notes right of it
ROW, GAP = 62, 22  # box height, arrow length between boxes

STYLES = {
    "spacy": ("#e3f2fd", "#1565c0"),
    "chars": ("#fff3e0", "#e65100"),
    "lstm": ("#fce4ec", "#ad1457"),
    "component": ("#e8f5e9", "#2e7d32"),
}

# (stage, title, detail lines, shape, notes); a tuple of two rows side by side is one row.
ROWS = [
    ("spacy", "Text", ["spaCy's tokenizer (and sentencizer or parser, if any)"], "Doc: n tokens", []),
    (
        "component",
        "Sentences",
        ["one sentence at a time, or windows of max_sentence_length", "tokens; whitespace tokens left out"],
        "T tokens + <S>, </S>",
        ["batched by length, up to", "max_batch_tokens"],
    ),
    (
        "chars",
        "Character ids",
        ["UTF-8 bytes (at most 48) between begin- and end-of-word", "marks, or the model's own character table"],
        "(T + 2, 50)",
        ["50 with the byte mapping"],
    ),
    (
        "chars",
        "Char CNN",
        ["character embedding, one convolution per filter width,", "max over positions, activation"],
        "(T + 2, filters)",
        ["2048 filters in every preset", "but tiny"],
    ),
    (
        "chars",
        "Highway layers",
        ["1 or 2 gated layers", "(ELMoForManyLangs: its word embedding joins here)"],
        "(T + 2, filters)",
        [],
    ),
    (
        "chars",
        "Projection",
        ["the context-independent token representation x", "(kept per word string in an LRU token cache)"],
        "(T + 2, P)",
        [],
    ),
    (
        ("lstm", "Forward LSTM stack", ["L layers, left to right,", "each projected to P"]),
        ("lstm", "Backward LSTM stack", ["L layers, right to left,", "with their own weights"]),
        "(T + 2, P) each",
        ["residual from layer 2; clipping", "where the model has it"],
    ),
    (
        "component",
        "L + 1 layers",
        ["h0 = [x; x], hj = [forward j; backward j];", "<S> and </S> dropped"],
        "(L + 1, n, 2P)",
        ['doc._.elmo_data (store "layers");', "TaskMix reads these in training"],
    ),
    (
        "component",
        "Mix",
        ["each layer standardized per token (layer_norm),", "then gamma * sum_j w_j * hj"],
        "(n, 2P)",
        ["doc.tensor or", "doc._.elmo_vectors, by store"],
    ),
    (
        "component",
        "Extensions and vector hooks",
        ["token._.elmo; span._.elmo and doc._.elmo (mean or max);", ".vector and .similarity (centred, if asked)"],
        "(2P,) per token, span, doc",
        [],
    ),
]

# Stage labels on the left: (text, first row, last row, style).
STAGES = [
    (["spaCy"], 0, 0, "spacy"),
    (["elmo", "component"], 1, 1, "component"),
    (["biLM:", "context-", "independent"], 2, 5, "chars"),
    (["biLM:", "contextual"], 6, 6, "lstm"),
    (["elmo", "component"], 7, 9, "component"),
]

FONT = "font-family=\"'DejaVu Sans', 'Segoe UI', Helvetica, Arial, sans-serif\""


def text(x, y, value, size=12.5, weight="normal", anchor="start", fill="#212121", style=""):
    extra = f' font-style="{style}"' if style else ""
    return (
        f'<text x="{x}" y="{y}" font-size="{size}" font-weight="{weight}" text-anchor="{anchor}" '
        f'fill="{fill}"{extra}>{escape(value)}</text>'
    )


def box(x, y, w, stage, title, lines):
    fill, stroke = STYLES[stage]
    parts = [
        f'<rect x="{x}" y="{y}" width="{w}" height="{ROW}" rx="8" fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>'
    ]
    parts.append(text(x + 12, y + 20, title, size=14.5, weight="bold", fill=stroke))
    for index, line in enumerate(lines):
        parts.append(text(x + 12, y + 38 + 15 * index, line))
    return parts


def arrow(x, y0, y1):
    return [
        f'<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1 - 6}" stroke="#616161" stroke-width="1.6"/>',
        f'<path d="M{x - 5},{y1 - 8} L{x},{y1} L{x + 5},{y1 - 8} Z" fill="#616161"/>',
    ]


def row_top(index):
    return 20 + index * (ROW + GAP)


def main() -> None:
    parts = []
    centre = (LEFT + RIGHT) // 2
    for index, row in enumerate(ROWS):
        y = row_top(index)
        if isinstance(row[0], tuple):
            half = (RIGHT - LEFT - 12) // 2
            for column, (stage, title, lines) in enumerate(row[:2]):
                parts += box(LEFT + column * (half + 12), y, half, stage, title, lines)
            shape, notes = row[2], row[3]
        else:
            stage, title, lines, shape, notes = row
            parts += box(LEFT, y, RIGHT - LEFT, stage, title, lines)
        parts.append(text(RIGHT + 12, y + 20, shape, size=12.5, weight="bold", fill="#37474f"))
        for line_index, line in enumerate(notes):
            parts.append(text(RIGHT + 12, y + 38 + 15 * line_index, line, size=11.5, fill="#546e7a", style="italic"))
        if index + 1 < len(ROWS):
            next_is_pair = isinstance(ROWS[index + 1][0], tuple)
            this_is_pair = isinstance(row[0], tuple)
            if next_is_pair or this_is_pair:
                half = (RIGHT - LEFT - 12) // 2
                for column in range(2):
                    parts += arrow(LEFT + column * (half + 12) + half // 2, y + ROW, y + ROW + GAP)
            else:
                parts += arrow(centre, y + ROW, y + ROW + GAP)
    for lines, first, last, stage in STAGES:
        _, stroke = STYLES[stage]
        top, bottom = row_top(first), row_top(last) + ROW
        parts.append(
            f'<path d="M{LEFT - 10},{top} L{LEFT - 18},{top} L{LEFT - 18},{bottom} L{LEFT - 10},{bottom}" '
            f'fill="none" stroke="{stroke}" stroke-width="1.5"/>'
        )
        middle = (top + bottom) / 2 - 8 * (len(lines) - 1) + 4
        for line_index, line in enumerate(lines):
            parts.append(
                text(LEFT - 26, middle + 16 * line_index, line, size=12.5, weight="bold", anchor="end", fill=stroke)
            )
    height = row_top(len(ROWS) - 1) + ROW + 20
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" {FONT}>',
        "<title>spacy-elmo data flow: text, tokens, character ids, char CNN, highways, projection, "
        "forward and backward LSTM stacks, L+1 layers, mix, extensions and vector hooks</title>",
        f'<rect width="{WIDTH}" height="{height}" rx="10" fill="#ffffff"/>',
        *parts,
        "</svg>",
    ]
    out = Path(__file__).with_name("data-flow.svg")
    out.write_text("\n".join(svg) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
