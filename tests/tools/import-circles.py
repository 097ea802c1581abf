#!/usr/bin/env python3
"""Import circles between the files of a Rust crate's src/ (issue 36: imports flow downward).

An edge A -> B means file A names an item *defined* in file B: `crate::`, `super::`,
`self::` and child-module paths are resolved to the file that defines the item, following
`pub use` re-exports (a re-export alone is a facade, not a dependency). Test modules
(`#[cfg(test)] mod tests`) and `tests.rs` files are left out. Prints every circle (a
strongly connected component of more than one file) with its edges, and exits 1 if there
is one.

usage: tests/tools/import-circles.py SRC_DIR... [--edges]
"""
import os, re, sys

def check(src):
    global files, mod2file, texts, defs, reexports, edges, idx, low, st, on, sccs, c
    files = {}
    for root, _, fs in os.walk(src):
        for f in fs:
            if f.endswith('.rs'):
                p = os.path.join(root, f); rel = os.path.relpath(p, src)
                if f == 'tests.rs' or '/tests/' in rel: continue
                files[rel] = p
    def modpath(rel):
        parts = rel[:-3].split('/')
        if parts[-1] in ('mod', 'lib', 'main'): parts = parts[:-1]
        if parts and parts[0] == 'bin': return None
        return parts
    mod2file = {tuple(modpath(r)): r for r in files if modpath(r) is not None}
    texts = {}
    for rel, p in files.items():
        t = open(p).read()
        cut = re.search(r'#\[cfg\(test\)\]\s*mod tests', t)
        if cut: t = t[:cut.start()]
        t = re.sub(r'//[^\n]*', '', t)
        texts[rel] = t
    DEF = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:unsafe\s+)?(?:struct|enum|fn|trait|type|const|static|union)\s+([A-Za-z_][A-Za-z0-9_]*)', re.M)
    MAC = re.compile(r'macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)')
    defs = {rel: set(DEF.findall(t)) | set(MAC.findall(t)) for rel, t in texts.items()}
    def expand(s, i, prefix, out):
        cur = list(prefix)
        while i < len(s):
            m = re.match(r'\s*([A-Za-z_][A-Za-z0-9_]*|\{|\*)', s[i:])
            if not m: out.append(cur); return i
            tok = m.group(1); i += m.end()
            if tok == '{':
                while True:
                    if re.match(r'\s*\}', s[i:]): i += re.match(r'\s*\}', s[i:]).end(); return i
                    i = expand(s, i, cur, out)
                    m2 = re.match(r'\s*([,}])', s[i:])
                    if not m2: return i
                    i += m2.end()
                    if m2.group(1) == '}': return i
            if tok == 'as':
                m4 = re.match(r'\s*[A-Za-z_][A-Za-z0-9_]*', s[i:]); i += m4.end() if m4 else 0
                out.append(cur[:-0] if cur else cur); return i
            cur.append(tok)
            m3 = re.match(r'\s*::', s[i:])
            if m3: i += m3.end(); continue
            m5 = re.match(r'\s+as\s+[A-Za-z_][A-Za-z0-9_]*', s[i:])
            if m5: i += m5.end()
            out.append(cur); return i
        out.append(cur); return i
    def abs_paths(rel, text, start_kw):
        """all crate-absolute paths named in text"""
        me = modpath(rel) or []
        is_dirmod = rel.endswith('mod.rs') or rel == 'lib.rs'
        here = list(me)  # the module this file is
        res = []
        children = re.findall(r'^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;', text, re.M)
        pat = r'(?<![A-Za-z0-9_:])(crate|super|self' + ''.join('|' + c for c in children) + r')::'
        for m in re.finditer(pat, text):
            out = []; expand(text, m.end(), [], out)
            kw = m.group(1)
            for path in out:
                if kw == 'crate': full = path
                elif kw == 'self': full = here + path
                elif kw == 'super':
                    base = here[:-1]; rest = path
                    while rest and rest[0] == 'super': base = base[:-1]; rest = rest[1:]
                    full = base + rest
                else: full = here + [kw] + path
                res.append(full)
        # bare `use name::...` of a sibling? (2018 edition: only crate-external) -- ignore
        return res
    def resolve(path, seen=None):
        """path -> defining file"""
        seen = seen or set()
        for n in range(len(path), 0, -1):
            f = mod2file.get(tuple(path[:n]))
            if f is None: continue
            rest = path[n:]
            if not rest: return f
            name = rest[0]
            if name in defs[f]: return f
            # re-export?
            key = (f, name)
            if key in seen: return f
            seen.add(key)
            for full in reexports.get(f, {}).get(name, []):
                t = resolve(full + rest[1:], seen)
                if t: return t
            return f
        return None
    reexports = {}
    for rel, t in texts.items():
        m_all = {}
        for m in re.finditer(r'pub(?:\([a-z]+\))?\s+use\s+', t):
            out = []
            sub = t[m.end():]
            # make it look like a crate path for abs_paths
            fake = 'crate::' if not re.match(r'\s*(crate|super|self)::', sub) else ''
            here = modpath(rel) or []
            end = t.find(';', m.end())
            seg = t[m.end():end]
            kwm = re.match(r'\s*(crate|super|self)::', seg)
            inner = []
            if kwm:
                expand(seg, kwm.end(), [], inner)
                kw = kwm.group(1)
                base = [] if kw == 'crate' else (here if kw == 'self' else here[:-1])
            else:
                expand(seg, 0, [], inner); base = here
            for p in inner:
                if p: m_all.setdefault(p[-1], []).append(base + p)
        reexports[rel] = m_all
    edges = {}
    for rel, t in texts.items():
        tg = set()
        # a `pub use` only re-exports (a facade): users are resolved through it to the
        # defining file, so the re-exporting file itself does not depend on what it names
        t = re.sub(r'pub(?:\([a-z]+\))?\s+use\s+[^;]*;', '', t)
        for full in abs_paths(rel, t, None):
            f = resolve(full)
            if f and f != rel: tg.add(f)
        edges[rel] = tg
    if '--edges' in sys.argv:
        for a in sorted(edges):
            for b in sorted(edges[a]): print(a, '->', b)
    sys.setrecursionlimit(10000)
    idx, low, st, on, sccs, c = {}, {}, [], set(), [], [0]
    def sc(v):
        idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(sorted(comp))
    for v in sorted(edges):
        if v not in idx: sc(v)
    for comp in sccs:
        print(f'circle of {len(comp)}:', ' '.join(comp))
        for a in comp:
            for b in sorted(edges[a] & set(comp)): print('   ', a, '->', b)
    print(f'{src}: {len(sccs)} circles')
    return len(sccs)

if __name__ == '__main__':
    dirs = [a.rstrip('/') for a in sys.argv[1:] if not a.startswith('--')]
    sys.exit(1 if sum(check(d) for d in dirs) else 0)
