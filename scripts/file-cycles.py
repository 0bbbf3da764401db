#!/usr/bin/env python3
"""Lists the pairs of source files in one crate that refer to each other, sibling or
parent/child (ARCHITECTURE.md: no two files call each other), and exits 1 if there is one.

    scripts/file-cycles.py [ROOT] [-v]     -v: show one reference each way

A reference is a `crate::`/`super::`/`self::` path or a path through a child module the file
declares; a `pub use` re-export is not one, and names are followed through re-exports to the
file that defines them. Test modules (`#[cfg(test)] mod tests`) and comments are skipped. It
reads the source text (no macro expansion, no type inference), so it is a tidy check, not a
proof."""
import os, re, sys, itertools
args = [a for a in sys.argv[1:] if a != '-v']
root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
verbose = '-v' in sys.argv
def modules(src):
    m = {}
    for dp, dn, fn in os.walk(src):
        for f in fn:
            if not f.endswith('.rs'): continue
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('lib', 'main') and len(rel) == 1: rel = []
            elif rel[-1] == 'mod': rel = rel[:-1]
            if tuple(rel) in m and not rel: continue  # lib.rs and main.rs: keep the first
            m[tuple(rel)] = p
    return m
def strip(text):
    text = re.sub(r'#\[cfg\(test\)\]\s*mod tests\s*\{.*', '', text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    return text
def use_paths(stmt):
    # expand nested braces of a use tree into full paths
    stmt = re.sub(r'\s+', '', stmt)
    def expand(s):
        i = s.find('{')
        if i < 0: return [s]
        depth = 0
        for j in range(i, len(s)):
            if s[j] == '{': depth += 1
            elif s[j] == '}':
                depth -= 1
                if depth == 0: break
        head, body, tail = s[:i], s[i+1:j], s[j+1:]
        parts, depth, cur = [], 0, ''
        for ch in body:
            if ch == ',' and depth == 0: parts.append(cur); cur = ''; continue
            if ch == '{': depth += 1
            if ch == '}': depth -= 1
            cur += ch
        parts.append(cur)
        out = []
        for p in parts:
            if p: out += expand(head + p + tail)
        return out
    return [re.sub(r'as\w+$', '', p) for p in expand(stmt)]
def analyse(src):
    m = modules(src)
    texts = {k: strip(open(p).read()) for k, p in m.items()}
    reexp = {}
    for k, t in texts.items():
        r = {}
        for st in re.findall(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', t):
            for p in use_paths(st):
                seg = p.split('::')
                r[seg[-1]] = seg
        reexp[k] = r
    def resolve(mp, seg, depth=0):
        base = list(mp)
        if seg and seg[0] == 'crate': base = []; seg = seg[1:]
        else:
            while seg and seg[0] in ('super', 'self'):
                if seg[0] == 'super': base = base[:-1]
                seg = seg[1:]
        full = base + seg
        for k in range(len(full), -1, -1):
            if tuple(full[:k]) in m:
                tgt = tuple(full[:k]); rest = full[k:]
                if rest and rest[0] in reexp[tgt] and depth < 5:
                    return resolve(tgt, reexp[tgt][rest[0]] + rest[1:], depth + 1)
                return tgt
        return None
    edges = {}
    for mp, t in texts.items():
        kids = set(re.findall(r'^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', t, re.M))
        body = re.sub(r'\bpub(?:\([^)]*\))?\s+use\s+[^;]+;', '', t)  # re-exports are not references
        paths = []
        for st in re.findall(r'\buse\s+([^;]+);', body):
            paths += use_paths(st)
        paths += re.findall(r'\b(?:crate|super|self)(?:::\w+)+', body)
        paths += [p for p in re.findall(r'\b\w+(?:::\w+)+', body) if p.split('::')[0] in kids]
        tg = {}
        for p in paths:
            seg = p.split('::')
            if seg[0] not in ('crate', 'super', 'self') and seg[0] not in kids: continue
            r = resolve(mp, seg)
            if r is not None and r != mp: tg.setdefault(r, p)
        edges[mp] = tg
    return edges
found = 0
for crate in ['.'] + sorted(os.listdir(root)):
    src = os.path.join(root, crate, 'src')
    if not os.path.isdir(src): continue
    e = analyse(src)
    for a, b in itertools.combinations(sorted(e), 2):
        if b in e[a] and a in e[b]:
            found += 1
            n = lambda x: '/'.join(x) or '(crate root)'
            print(f"{'lockkit' if crate == '.' else crate}: {n(a)} <-> {n(b)}" + (f"   ({e[a][b]} / {e[b][a]})" if verbose else ''))
sys.exit(1 if found else 0)
