"""tokref.py: an independent pure-Python reference of the Hugging Face
tokenizer.json subset attnlab implements (src/tok, docs/tokenizers.md), for
tests/ref/test_tokenizer.py. Not a test itself.

Written from the format and algorithm descriptions, not from attnlab's C, and
deliberately by other means where it can be:

* pre-tokenizer regexes run on Python's `re` engine (a backtracking engine
  with the same leftmost-first alternation as Oniguruma) after translating
  the Unicode escapes it lacks: \\p{L} and \\p{N} become explicit classes of
  the code points whose unicodedata category starts with L or N, \\s and \\S
  the White_Space set (tab..CR, U+0085 and categories Zs, Zl, Zp; not
  Python's own \\s, which adds U+001C..U+001F);
* BPE is the original GPT-2 loop (merge every occurrence of the best-ranked
  pair, repeat), not a priority queue; for merges learned by BPE training the
  two give the same tokens;
* NFC is unicodedata.normalize.

Everything works on a parsed tokenizer.json (a dict) plus an optional
tokenizer_config.json dict: Tokenizer(tj, cfg).encode(text, add_special) and
.decode(ids, skip_special).
"""
import re
import unicodedata

# --------------------------------------------------------------------------
# Unicode classes


def _is_white_space(cp):
    return 0x09 <= cp <= 0x0D or cp == 0x85 or unicodedata.category(chr(cp)) in ("Zs", "Zl", "Zp")


def _ranges(pred):
    out, start = [], None
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:  # surrogates are no characters of any class here
            ok = False
        else:
            ok = pred(cp)
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def _class_body(ranges):
    esc = lambda cp: "\\U%08x" % cp
    return "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in ranges)


_CLASSES = {}


def _classes():
    if not _CLASSES:
        _CLASSES["L"] = _class_body(_ranges(lambda cp: unicodedata.category(chr(cp)).startswith("L")))
        _CLASSES["N"] = _class_body(_ranges(lambda cp: unicodedata.category(chr(cp)).startswith("N")))
        _CLASSES["s"] = _class_body(_ranges(_is_white_space))
    return _CLASSES


def translate_regex(pattern):
    """An Oniguruma pattern with \\p{L}, \\p{N}, \\s, \\S -> a Python re pattern."""
    cls = _classes()
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1]
            if nxt == "p" and pattern[i + 2] == "{":
                end = pattern.index("}", i)
                body = cls[pattern[i + 3:end]]
                out.append(body if in_class else "[" + body + "]")
                i = end + 1
                continue
            if nxt == "s":
                out.append(cls["s"] if in_class else "[" + cls["s"] + "]")
                i += 2
                continue
            if nxt == "S":
                assert not in_class, "\\S inside a class"
                out.append("[^" + cls["s"] + "]")
                i += 2
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return re.compile("".join(out))


GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

# --------------------------------------------------------------------------
# GPT-2's byte <-> character map


def bytes_to_unicode():
    """Byte -> character: printable Latin-1 bytes stand for themselves, the
    other 68 bytes (in order) for U+0100 onwards."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}

# --------------------------------------------------------------------------
# BPE


def bpe_merge(symbols, ranks):
    """The GPT-2 loop: while some adjacent pair has a rank, merge every
    occurrence (left to right) of the lowest-ranked one."""
    symbols = list(symbols)
    while len(symbols) > 1:
        best = None
        for i in range(len(symbols) - 1):
            r = ranks.get((symbols[i], symbols[i + 1]))
            if r is not None and (best is None or r < best):
                best = r
        if best is None:
            break
        merged, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and ranks.get((symbols[i], symbols[i + 1])) == best:
                merged.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    return symbols


class Tokenizer:
    def __init__(self, tj, cfg=None):
        m = tj["model"]
        assert m.get("type", "BPE") == "BPE"
        self.vocab = dict(m["vocab"])
        self.ranks = {}
        for rank, mg in enumerate(m.get("merges") or []):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            self.ranks[(a, b)] = rank
        self.unk = m.get("unk_token")
        self.fuse_unk = bool(m.get("fuse_unk"))
        self.byte_fallback = bool(m.get("byte_fallback"))
        self.ignore_merges = bool(m.get("ignore_merges"))
        self.added = []  # (content, id, special, normalized)
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.special_ids = set()
        for a in tj.get("added_tokens") or []:
            special = bool(a.get("special"))
            normalized = a.get("normalized", not special)
            self.added.append((a["content"], a["id"], special, normalized))
            self.id_to_token[a["id"]] = a["content"]
            if special:
                self.special_ids.add(a["id"])
        self.normalizers = self._flatten(tj.get("normalizer"), "normalizers")
        self.pretoks = self._flatten(tj.get("pre_tokenizer"), "pretokenizers")
        self.decoders = self._flatten(tj.get("decoder"), "decoders")
        self.has_decoder = tj.get("decoder") is not None
        self.prefix, self.suffix = [], []
        for pp in self._flatten(tj.get("post_processor"), "processors"):
            if pp["type"] == "TemplateProcessing":
                seen_a = False
                for item in pp["single"]:
                    if "Sequence" in item:
                        seen_a = True
                    else:
                        ids = pp["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                        (self.suffix if seen_a else self.prefix).extend(ids)
        self.bos = self.prefix[0] if self.prefix else None
        self.eos = self.suffix[-1] if self.suffix else None
        cfg = cfg or {}

        def tok_id(v):
            s = v["content"] if isinstance(v, dict) else v
            for content, i, _, _ in self.added:
                if content == s:
                    return i
            return self.vocab[s]

        if cfg.get("bos_token") is not None:
            self.bos = tok_id(cfg["bos_token"])
        if cfg.get("eos_token") is not None:
            self.eos = tok_id(cfg["eos_token"])
        if "add_bos_token" in cfg:
            self.prefix = [self.bos] if cfg["add_bos_token"] else []
        if "add_eos_token" in cfg:
            self.suffix = [self.eos] if cfg["add_eos_token"] else []
        for x in (self.bos, self.eos):
            if x is not None:
                self.special_ids.add(x)
        # the two added-token sets: raw text, and normalized text (content normalized too)
        self.raw_added = [(c, i) for c, i, _, n in self.added if not n]
        self.norm_added = [(self.normalize(c), i) for c, i, _, n in self.added if n]
        self.regexes = {}

    @staticmethod
    def _flatten(node, key):
        if node is None:
            return []
        if node["type"] == "Sequence":
            out = []
            for x in node[key]:
                out += Tokenizer._flatten(x, key)
            return out
        return [node]

    # ---- encode ----

    def normalize(self, s):
        for n in self.normalizers:
            t = n["type"]
            if t == "NFC":
                s = unicodedata.normalize("NFC", s)
            elif t == "Prepend":
                s = n["prepend"] + s if s else s
            elif t == "Replace":
                s = s.replace(n["pattern"]["String"], n["content"])
            else:
                raise ValueError("normalizer " + t)
        return s

    @staticmethod
    def split_added(text, tokens):
        """[(is_token, str_or_id)]: leftmost, longest added-token matches."""
        out, i, start = [], 0, 0
        while i < len(text):
            best = None
            for content, tid in tokens:
                if content and text.startswith(content, i) and (best is None or len(content) > len(best[0])):
                    best = (content, tid)
            if best is None:
                i += 1
                continue
            if start < i:
                out.append((False, text[start:i], start))
            out.append((True, best[1], i))
            i += len(best[0])
            start = i
        if start < len(text):
            out.append((False, text[start:], start))
        return out

    def _regex(self, pattern):
        if pattern not in self.regexes:
            self.regexes[pattern] = translate_regex(pattern)
        return self.regexes[pattern]

    def _split(self, pattern, piece):
        out, last = [], 0
        for m in self._regex(pattern).finditer(piece):
            if m.start() > last:
                out.append(piece[last:m.start()])
            out.append(m.group())
            last = m.end()
        if last < len(piece):
            out.append(piece[last:])
        return out

    def pretokenize(self, s, at_start):
        pieces = [(s, at_start)]
        for p in self.pretoks:
            t, nxt = p["type"], []
            for piece, first in pieces:
                if t == "Split":
                    parts = self._split(p["pattern"]["Regex"], piece)
                    nxt += [(x, first and k == 0) for k, x in enumerate(parts)]
                elif t == "ByteLevel":
                    if p.get("add_prefix_space", True) and not piece.startswith(" "):
                        piece = " " + piece
                    parts = self._split(GPT2_REGEX, piece) if p.get("use_regex", True) else [piece]
                    nxt += [("".join(BYTE_CHAR[b] for b in x.encode("utf-8")), first and k == 0)
                            for k, x in enumerate(parts)]
                elif t == "Metaspace":
                    rep = p["replacement"]
                    scheme = p.get("prepend_scheme", "always" if p.get("add_prefix_space", True) else "never")
                    x = piece.replace(" ", rep)
                    if x and not x.startswith(rep) and (scheme == "always" or (scheme == "first" and first)):
                        x = rep + x
                    if not p.get("split", True):
                        nxt.append((x, first))
                    else:
                        cuts = [k for k in range(1, len(x)) if x[k] == rep]
                        bounds = [0] + cuts + [len(x)]
                        nxt += [(x[a:b], first and a == 0) for a, b in zip(bounds, bounds[1:]) if b > a]
                else:
                    raise ValueError("pre_tokenizer " + t)
            pieces = nxt
        return [x for x, _ in pieces if x]

    def model(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols, unk_run = [], False
        for ch in word:
            if ch in self.vocab:
                symbols.append(ch)
                unk_run = False
            elif self.byte_fallback and all("<0x%02X>" % b in self.vocab for b in ch.encode("utf-8")):
                symbols += ["<0x%02X>" % b for b in ch.encode("utf-8")]
                unk_run = False
            elif self.unk is not None:
                if not (unk_run and self.fuse_unk):
                    symbols.append(self.unk)
                unk_run = True
        # the unknown token never merges: it is not a character of any merge
        return [self.vocab[s] for s in bpe_merge(symbols, self.ranks)]

    def encode(self, text, add_special=True):
        ids = list(self.prefix) if add_special else []
        for is_tok, x, off in self.split_added(text, self.raw_added):
            if is_tok:
                ids.append(x)
                continue
            norm = self.normalize(x)
            for is_tok2, y, off2 in self.split_added(norm, self.norm_added):
                if is_tok2:
                    ids.append(y)
                    continue
                for piece in self.pretokenize(y, off == 0 and off2 == 0):
                    ids += self.model(piece)
        if add_special:
            ids += self.suffix
        return ids

    # ---- decode ----

    def decode(self, ids, skip_special=False):
        tokens = [self.id_to_token[i] for i in ids if not (skip_special and i in self.special_ids)]
        if not self.has_decoder:
            return " ".join(tokens)
        for d in self.decoders:
            t = d["type"]
            if t == "ByteLevel":
                raw = b""
                for tok in tokens:
                    if all(c in CHAR_BYTE for c in tok):
                        raw += bytes(CHAR_BYTE[c] for c in tok)
                    else:
                        raw += tok.encode("utf-8")
                tokens = [raw.decode("utf-8", errors="replace")]
            elif t == "Replace":
                tokens = [tok.replace(d["pattern"]["String"], d["content"]) for tok in tokens]
            elif t == "ByteFallback":
                out, run = [], b""
                for tok in tokens + [None]:
                    m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", tok) if tok is not None else None
                    if m:
                        run += bytes([int(m.group(1), 16)])
                        continue
                    if run:
                        try:
                            out.append(run.decode("utf-8"))
                        except UnicodeDecodeError:
                            out += ["\ufffd"] * len(run)
                        run = b""
                    if tok is not None:
                        out.append(tok)
                tokens = out
            elif t == "Fuse":
                tokens = ["".join(tokens)]
            elif t == "Strip":
                out = []
                for tok in tokens:
                    for _ in range(d.get("start", 0)):
                        if tok.startswith(d["content"]):
                            tok = tok[1:]
                    for _ in range(d.get("stop", 0)):
                        if tok.endswith(d["content"]):
                            tok = tok[:-1]
                    out.append(tok)
                tokens = out
            elif t == "Metaspace":
                rep = d["replacement"]
                scheme = d.get("prepend_scheme", "always" if d.get("add_prefix_space", True) else "never")
                tokens = [tok.replace(rep, "" if k == 0 and scheme != "never" else " ")
                          for k, tok in enumerate(tokens)]
            else:
                raise ValueError("decoder " + t)
        return "".join(tokens)
