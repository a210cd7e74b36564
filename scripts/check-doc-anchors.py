#!/usr/bin/env python3
"""Every link to a heading in docs/*.md (`#anchor` or `OTHER.md#anchor`) names a heading that
exists, by GitHub's anchor rule: lowercase, punctuation dropped, spaces to '-', '-1', '-2' ... on
repeats. Exits 1 and names each broken link. Usage: scripts/check-doc-anchors.py [ROOT]"""
import pathlib, re, sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
docs = root / "docs"

def anchors(path):
    seen, out, fence = {}, set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out

bad = 0
for doc in sorted(docs.glob("*.md")):
    for m in re.finditer(r"\]\(([^)\s]*?)#([^)\s]+)\)", doc.read_text()):
        target = (doc.parent / m.group(1)) if m.group(1) else doc
        if not target.exists() or m.group(2) not in anchors(target):
            print(f"{doc.relative_to(root)}: no heading for ({m.group(1)}#{m.group(2)})")
            bad += 1
sys.exit(1 if bad else 0)
