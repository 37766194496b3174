#!/usr/bin/env python3
"""Checks that the paths and Rust items a codemap names exist.

Usage: scripts/check-doc-paths.py [FILE...]   (default: ARCHITECTURE.md)

Paths: every `backticked` token that looks like a file or directory (has a
slash, or ends in .rs/.md/.sh/.py/.c/.h) must exist, relative to the
repository root, to crates/, to the document's directory, to the crate of
the current `## crates/<name>` section (or of a bullet that starts with a
crate's name) and its src/, or to the directory of the last path named in
the same bullet; a bare file name may also be found anywhere in that crate
(outside a crate section: anywhere in the repository). Items: `Type::item` must have `item` defined in
crates/ (fn, const, static, struct, enum, trait, type, mod, a field or an
enum variant), and a bare `CamelCase` token must be a type, trait or
variant defined there. Prints every miss and exits 1 if there is one.
"""

import fnmatch
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_EXT = (".rs", ".md", ".sh", ".py", ".c", ".h", ".toml")
# Named on purpose as things that do not exist (the design brief's, not built).
NOT_BUILT = {"crates/oxmpi-mtl"}
# Files a command writes (named as its output, not in the repository).
GENERATED = {"report.md", "summary.csv", "samples.csv", "limits.csv"}


def rust_sources():
    out = []
    for base, dirs, files in os.walk(os.path.join(ROOT, "crates")):
        dirs[:] = [d for d in dirs if d not in ("target",)]
        out += [os.path.join(base, f) for f in files if f.endswith(".rs")]
    return out


SOURCE = "\n".join(open(p, encoding="utf-8", errors="replace").read() for p in rust_sources())


def item_defined(name):
    pats = [
        rf"\b(fn|const|static|struct|enum|trait|type|mod|macro_rules!)\s+{re.escape(name)}\b",
        rf"\b{re.escape(name)}\s*:",  # a field
        rf"^\s*{re.escape(name)}\s*(\(|\{{|,|=)",  # an enum variant
        rf"\bpub\s+(unsafe\s+)?trait\s+{re.escape(name)}\b",
    ]
    return any(re.search(p, SOURCE, re.M) for p in pats)


def looks_like_path(tok):
    if " " in tok or tok.startswith(("-", "$", "<")) or "::" in tok or "=" in tok:
        return False
    if tok.startswith(("../shared/", "/", "target/", "//")) or tok in NOT_BUILT or tok in GENERATED:
        return False  # outside the repository, build output, or named as absent
    return "/" in tok or tok.endswith(PATH_EXT)


def check(doc):
    misses = []
    crate = None
    context = None  # directory of the last path in the current bullet
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    in_code = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        m = re.match(r"^##+ .*?crates/([a-z0-9-]+)", line)
        if m:
            crate = m.group(1)
            context = None
        elif line.startswith("## "):
            crate = None
            context = None
        if re.match(r"^\s*(- |\d+\. )", line) or not line.strip():
            context = None
            m = re.match(r"^- `(oxmpi[a-z-]*)`", line)
            if m and os.path.isdir(os.path.join(ROOT, "crates", m.group(1), "src")):
                context = os.path.join(ROOT, "crates", m.group(1))
        for tok in re.findall(r"`([^`]+)`", line):
            tok = tok.strip()
            if looks_like_path(tok):
                cands = [os.path.join(ROOT, tok), os.path.join(ROOT, "crates", tok),
                         os.path.join(ROOT, os.path.dirname(doc), tok)]
                if crate:
                    cands += [os.path.join(ROOT, "crates", crate, tok),
                              os.path.join(ROOT, "crates", crate, "src", tok)]
                if context:
                    cands.insert(0, os.path.join(context, tok))
                    m = re.match(r"(.*/crates/[^/]+)(/|$)", context)
                    if m:
                        cands += [os.path.join(m.group(1), tok),
                                  os.path.join(m.group(1), "src", tok)]
                found = None
                for c in cands:
                    if "*" in tok:
                        d = os.path.dirname(c)
                        if os.path.isdir(d) and fnmatch.filter(os.listdir(d), os.path.basename(c)):
                            found = d
                            break
                    elif os.path.exists(c):
                        found = c
                        break
                if found is None and "/" not in tok:
                    where = os.path.join(ROOT, "crates", crate) if crate else ROOT
                    for base, dirs, files in os.walk(where):
                        dirs[:] = [d for d in dirs if d not in ("target", ".git")]
                        if tok in files:
                            found = os.path.join(base, tok)
                            break
                if found is None:
                    misses.append(f"{doc}:{n}: path `{tok}` not found")
                elif "/" in tok:
                    context = found if os.path.isdir(found) else os.path.dirname(found)
                continue
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)(\(.*\))?", tok)
            if m:
                last = tok.split("(")[0].split("::")[-1]
                if not item_defined(last):
                    misses.append(f"{doc}:{n}: item `{tok}` ({last}) not defined in crates/")
                continue
            if re.fullmatch(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+", tok):
                if not item_defined(tok):
                    misses.append(f"{doc}:{n}: type `{tok}` not defined in crates/")
    return misses


def main():
    docs = sys.argv[1:] or ["ARCHITECTURE.md"]
    misses = [m for d in docs for m in check(d)]
    for m in misses:
        print(m)
    print(f"{len(misses)} missing", file=sys.stderr)
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()
