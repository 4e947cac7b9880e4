#!/usr/bin/env python3
"""Check relative links and #anchors in README.md and docs/*.md (GitHub heading slugs).

Usage: python3 docs/check-links.py [REPO_ROOT]   (exit 1 when a link or anchor does not resolve)"""
import re, sys, os, glob
root = sys.argv[1] if len(sys.argv) > 1 else '.'
def strip_code(text):
    out, code = [], False
    for l in text.split('\n'):
        if l.lstrip().startswith('```'):
            code = not code; out.append(''); continue
        out.append('' if code else l)
    return '\n'.join(out)
def anchors(path):
    seen, res = {}, set()
    for l in strip_code(open(path).read()).split('\n'):
        m = re.match(r'^#{1,6} (.*?)\s*#*\s*$', l)
        if not m: continue
        s = m.group(1).strip().lower()
        s = re.sub(r'[^\w\- ]', '', s).replace(' ', '-')
        n = seen.get(s, 0); seen[s] = n + 1
        res.add(s if n == 0 else f'{s}-{n}')
    return res
files = [os.path.join(root, 'README.md')] + sorted(glob.glob(os.path.join(root, 'docs', '*.md')))
bad = 0; count = 0
for f in files:
    text = strip_code(open(f).read())
    text = re.sub(r'`[^`]*`', lambda m: m.group(0) if '](' not in m.group(0) else '', text)
    for m in re.finditer(r'\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)', text, re.S):
        target = m.group(2)
        if re.match(r'^[a-z]+:', target): continue
        count += 1
        path, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        line = text[:m.start()].count('\n') + 1
        if not os.path.exists(dest):
            print(f'{f}:{line}: missing file {target}'); bad += 1; continue
        if anchor:
            if not dest.endswith('.md'):
                print(f'{f}:{line}: anchor on non-markdown {target}'); bad += 1
            elif anchor not in anchors(dest):
                print(f'{f}:{line}: missing anchor {target}'); bad += 1
print(f'{count} relative links checked, {bad} broken')
sys.exit(1 if bad else 0)
