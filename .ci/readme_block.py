"""Print the first fenced code block of a language under a Markdown heading.

    python3 readme_block.py README.md "Use it from Rust" rust
"""

import re
import sys


def block(text: str, heading: str, language: str) -> str:
    # Sections are level-2 or deeper headings ("## "); a "# " line inside a
    # code block is a comment.
    section = re.search(rf"^##+ {re.escape(heading)}\n(.*?)(?=^##+ |\Z)", text, re.M | re.S)
    if not section:
        sys.exit(f"no heading '{heading}'")
    fenced = re.search(rf"^```{re.escape(language)}\n(.*?)^```", section.group(1), re.M | re.S)
    if not fenced:
        sys.exit(f"no ```{language} block under '{heading}'")
    return fenced.group(1)


if __name__ == "__main__":
    path, heading, language = sys.argv[1:4]
    with open(path, encoding="utf-8") as f:
        sys.stdout.write(block(f.read(), heading, language))
