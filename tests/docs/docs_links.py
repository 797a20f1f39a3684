#!/usr/bin/env python3
"""Every relative link of docs/*.md and README.md resolves: the file exists, and an
anchor (#section) names a heading of the Markdown file it points into, as GitHub makes
anchors from headings. Links inside code are not links and are skipped.

usage: docs_links.py SOURCE_ROOT
"""
import pathlib
import re
import sys

LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def prose_lines(text):
    """The lines outside fenced code, with inline code spans blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r'`[^`]*`', '``', line)


def heading_anchors(path):
    """The anchors of a Markdown file's headings (a repeated one gets -1, -2, ...)."""
    seen, found = {}, set()
    fenced = False
    for line in path.read_text(encoding='utf-8').splitlines():
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s)
        seen[s] = 0 if n is None else n + 1
        found.add(s if n is None else f'{s}-{n + 1}')
    return found


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    files = sorted((root / 'docs').glob('*.md')) + [root / 'README.md']
    bad = 0
    for f in files:
        for n, line in prose_lines(f.read_text(encoding='utf-8')):
            for target in LINK.findall(line):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition('#')
                dest = (f.parent / path).resolve() if path else f
                why = None
                if not dest.exists():
                    why = 'no such file'
                elif anchor and dest.suffix == '.md' and anchor not in heading_anchors(dest):
                    why = f'no heading with anchor #{anchor} in {dest.relative_to(root)}'
                if why:
                    print(f'{f.relative_to(root)}:{n}: {target}: {why}')
                    bad += 1
    print(f'{len(files)} files checked, {bad} broken link(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
