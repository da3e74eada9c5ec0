#!/usr/bin/env bash
# test_explore.sh: `attnlab explore` writes one self-contained HTML page that
#   - embeds exactly the weights `attnlab attnmap` writes to its NPY (every
#     layer and head), the statistics of its JSON and the head-similarity
#     matrices of `attnlab heads`, and the figures' colour tables;
#   - refers to nothing outside itself (no src/href/url(), no fetch);
#   - in headless Chromium (tests/browser/explore_check.py, DevTools protocol
#     over a pipe, real mouse events) loads without exceptions, console or log
#     errors and without network requests, draws a heatmap that is not blank,
#     shows the NPY's weight and the right characters when the mouse is over a
#     known cell, "masked" above the causal diagonal, redraws on the
#     log/linear toggle, and selects a head by a click on the similarity
#     matrix; also for a softmax-free model with signed weights, a short
#     input, and a model path and text full of HTML and JSON specials;
#   - refuses bad input with one line (usage errors exit 2).
# Chromium is Debian's `chromium` (scripts/install-deps.sh --test); set
# ATTNLAB_CHROMIUM to use another binary.
#
# usage: bash tests/cli/test_explore.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"


make_text "$WORK/text.txt" 300


# Python that the checks below share: the page's embedded data, decoded.
PAGE_PY='
import base64, json, re, sys
import numpy as np
def load_page(path):
    html = open(path, encoding="utf-8").read()
    w = re.findall(r"<script type=\"text/plain\" id=\"al-weights\">\n(.*?)</script>", html, re.S)
    d = re.findall(r"<script type=\"application/json\" id=\"al-data\">\n(.*?)\n</script>", html, re.S)
    assert len(w) == 1 and len(d) == 1, "expected one weights and one data element"
    data = json.loads(d[0])
    lines = [l for l in w[0].split("\n") if l]
    T = data["tokens"]
    heads = []
    for l in lines:
        v = np.frombuffer(base64.b64decode(l, validate=True), dtype="<f4")
        P = np.zeros((T, T), np.float32)
        if data["causal"]:
            assert v.size == T * (T + 1) // 2, (v.size, T)
            P[np.tril_indices(T)] = v
        else:
            P[:] = v.reshape(T, T)
        heads.append(P)
    return html, data, np.array(heads)
'

begin "train tiny models (softmax, and poly: signed weights)"
run train --precision f32 --layers 2 --hidden 32 --heads 4 --context 32 --batch 2 --steps 3 --eval-tokens 64 \
    --data "$WORK/text.txt" --out "$WORK/m" --quiet
check_ok
run train --precision f32 --score poly --layers 2 --hidden 32 --heads 4 --context 32 --batch 2 --steps 3 --eval-tokens 64 \
    --data "$WORK/text.txt" --out "$WORK/poly" --quiet
check_ok
end

begin "explore writes one page; attnmap and heads give the numbers it embeds"
run explore --model "$WORK/m" --text "$WORK/text.txt" --out "$WORK/page.html"
check_ok
check_stdout "wrote .*page.html"
check_exists "$WORK/page.html"
check_no_tmp "$WORK"
run attnmap --model "$WORK/m" --text "$WORK/text.txt" --layer all --head all --max-tokens 256 --out "$WORK/ref.png"
check_ok
run heads --model "$WORK/m" --layer 0 --out "$WORK/heads.png"
check_ok
end

begin "the page embeds the NPY's weights exactly, the statistics, similarity and colour tables"
check_py "embedded data" "$PAGE_PY"'
html, data, W = load_page(sys.argv[1])
P = np.load(sys.argv[2] + ".npy")
ref = json.load(open(sys.argv[2] + ".json"))
hj = json.load(open(sys.argv[3]))
text = open(sys.argv[4], "rb").read()
L, H, T = data["layers"], data["heads"], data["tokens"]
assert (L, H, T) == (2, 4, 256) and data["causal"] is True, (L, H, T)
assert W.shape == P.shape == (8, 256, 256), (W.shape, P.shape)
assert np.array_equal(W, P), "embedded weights differ from the NPY by %g" % np.abs(W - P).max()
assert data["bytes"] == list(text[:256]), "input bytes"
for p in ref["pairs"]:
    s = data["stats"][p["layer"]][p["head"]]
    for k in ("sink_mass", "entropy", "mean_distance", "topk_mass", "row_sum"):
        assert abs(s[k] - p[k]) <= 1e-5 * max(1, abs(p[k])), (k, s[k], p[k])
    assert abs(s["max"] - p["max"]) < 1e-6 and abs(s["min"] - p["min"]) < 1e-6
assert len(data["similarity"]) == L
for l in range(L):
    G = np.array(data["similarity"][l]["matrix"])
    R = np.array(hj["models"][0]["layers"][l]["similarity"])
    assert np.allclose(G, R, atol=1e-9), "similarity of layer %d" % l
    assert abs(data["similarity"][l]["erank_uncentered"] * 100 - hj["models"][0]["layers"][l]["erank_uncentered_pct"]) < 1e-6
vir, rdy = data["colormaps"]["viridis"], data["colormaps"]["RdYlBu_r"]
assert len(vir) == len(rdy) == 1536
assert vir[:6] == "440154" and vir[-6:] == "fde724", "viridis endpoints (matplotlib bytes)"
assert rdy[:6] == "313695" and rdy[-6:] == "a50026", "RdYlBu_r endpoints"
' "$WORK/page.html" "$WORK/ref" "$WORK/heads.json" "$WORK/text.txt"
check_py "self-contained" '
import re, sys
html = open(sys.argv[1], encoding="utf-8").read()
assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
for pat in (r"\ssrc\s*=", r"\shref\s*=", r"<link", r"<iframe", r"@import", r"url\(", r"fetch\(", r"XMLHttpRequest",
            r"\bimport\(", r"WebSocket", r"<img"):
    assert not re.search(pat, html, re.I), "page refers to something outside itself: " + pat
urls = set(re.findall(r"\b(?:https?|ftp)://[^\s\"<)]*", html))
assert urls <= {"http://colorbrewer.org/"}, urls
assert "Cynthia Brewer" in html, "ColorBrewer credit"
' "$WORK/page.html"
end

begin "Chromium: loads cleanly, draws, hover shows the NPY weight, toggle and similarity click work"
if browser_check "$WORK/check.json" --page "$WORK/page.html" --layer 1 --head 2 --cell 37,5 --masked 3,9 --sim 2,0 \
    --screenshot "$WORK/page.png"; then
    check_py "browser" '
import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
P = np.load(sys.argv[2])
text = open(sys.argv[3], "rb").read()
hj = json.load(open(sys.argv[4]))
assert c["ready"], "page did not finish loading: " + repr(c.get("error_text"))
assert not c["errors"], c["errors"]
assert not c["network_requests"], c["network_requests"]
assert c["state"] == {"layer": 1, "head": 2, "scale": "log"}, c["state"]
px = c["pixels_log"]
assert px["nonwhite"] >= 0.45 * px["pixels"], "heatmap mostly blank: %s" % px
assert px["colours"] >= 5, "heatmap nearly uniform: %s" % px
def name(b):
    return {32: "\x27 \x27", 10: "\x27\\n\x27"}.get(b, "\x27%s\x27" % chr(b))
t = c["tip"]
q, k, pair = 37, 5, 1 * 4 + 2
assert not t["hidden"] and t["q"] == str(q) and t["k"] == str(k), t
assert t["qc"] == name(text[q]) and t["kc"] == name(text[k]), (t["qc"], t["kc"], text[q], text[k])
want = float(P[pair, q, k])
got = float(t["w"])
assert want > 0 and abs(got - want) <= 1e-5 * abs(want), "tooltip weight %s, NPY %r" % (t["w"], want)
assert c["tip_masked"]["w"] == "masked", c["tip_masked"]
assert c["state_after_linear"]["scale"] == "linear", c["state_after_linear"]
assert c["pixels_linear"]["checksum"] != px["checksum"], "linear scale drew the same pixels"
assert c["pixels_linear"]["nonwhite"] >= 0.45 * px["pixels"], c["pixels_linear"]
assert c["tip_linear"]["w"] == t["w"], (c["tip_linear"], t)
s = float(c["tip_sim"]["s"])
G = hj["models"][0]["layers"][1]["similarity"]
assert c["tip_sim"]["heads"] == "Heads 2 and 0", c["tip_sim"]
assert abs(s - G[2][0]) <= 5.1e-5, "similarity read-out %s, heads.json %r" % (c["tip_sim"]["s"], G[2][0])
assert c["state_after_sim_click"] == {"layer": 1, "head": 0, "scale": "linear"}, c["state_after_sim_click"]
assert c["head_select_after_sim_click"] == "0"
assert c["stats_title_after_sim_click"].endswith("layer 1 head 0"), c["stats_title_after_sim_click"]
assert c["tip_text"]["q"] == str(q), c["tip_text"]
' "$WORK/check.json" "$WORK/ref.npy" "$WORK/text.txt" "$WORK/heads.json"
fi
check_exists "$WORK/page.png"
end

begin "signed weights, 48 tokens, HTML/JSON specials in the model path and the text"
weird="$WORK/we<ir>d&\"dir"
cp -r "$WORK/poly" "$weird"
{
    printf 'say "hi" </script><b>x</b> & \\u0041 \t caf\xc3\xa9 \xff\n'
    cat "$WORK/text.txt"
} >"$WORK/odd.txt"
run explore --model "$weird" --text "$WORK/odd.txt" --max-tokens 48 --out "$WORK/odd.HTML"
check_ok
run attnmap --model "$weird" --text "$WORK/odd.txt" --layer 0 --head 1 --max-tokens 48 --out "$WORK/odd-ref.png"
check_ok
check_py "embedded" "$PAGE_PY"'
html, data, W = load_page(sys.argv[1])
P = np.load(sys.argv[2])
assert data["tokens"] == 48 and data["score"] == "poly", (data["tokens"], data["score"])
assert data["model"] == sys.argv[3], data["model"]
assert np.array_equal(W[1], P[0])
assert "</script><b>" not in html.split("id=\"al-data\"")[1].split("</script>")[0], "unescaped text in the data"
' "$WORK/odd.HTML" "$WORK/odd-ref.npy" "$weird"
if browser_check "$WORK/odd.json" --page "$WORK/odd.HTML" --layer 0 --head 1 --cell 44,36 --sim 1,3; then
    check_py "browser" '
import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
P = np.load(sys.argv[2])
assert c["ready"] and not c["errors"] and not c["network_requests"], (c.get("error_text"), c["errors"], c["network_requests"])
assert sys.argv[3].rsplit("/", 1)[1] in c["title"], c["title"]
want, got = float(P[0, 44, 36]), float(c["tip"]["w"])
assert abs(got - want) <= 1e-5 * abs(want) + 1e-12, (got, want)
assert (c["tip"]["qc"], c["tip"]["kc"]) == ("\x27\\xff\x27", "\x27\\t\x27"), c["tip"]
assert c["pixels_log"]["nonwhite"] > 0 and c["pixels_linear"]["nonwhite"] >= 0.45 * c["pixels_linear"]["pixels"]
assert c["state_after_sim_click"]["head"] == 3, c["state_after_sim_click"]
' "$WORK/odd.json" "$WORK/odd-ref.npy" "$weird"
fi
end

begin "--out must be an .html file (usage error)"
run explore --model "$WORK/m" --text "$WORK/text.txt" --out "$WORK/notpage.png"
check_error 2 "html"
check_absent "$WORK/notpage.png"
end

begin "--max-tokens out of range (usage error)"
run explore --model "$WORK/m" --text "$WORK/text.txt" --max-tokens 5000 --out "$WORK/big.html"
check_error 2 "max-tokens"
run explore --model "$WORK/m" --text "$WORK/text.txt" --max-tokens 1 --out "$WORK/big.html"
check_error 2 "max-tokens"
check_absent "$WORK/big.html"
end

begin "a page too large for a browser is refused before any work, naming the --max-tokens that fits"
run train --precision f32 --layers 16 --hidden 64 --heads 32 --context 32 --batch 2 --steps 1 --eval-tokens 64 \
    --data "$WORK/text.txt" --out "$WORK/wide" --quiet
check_ok
run explore --model "$WORK/wide" --text "$WORK/text.txt" --max-tokens 1024 --out "$WORK/wide.html"
check_error 1 "16 layers x 32 heads .* MB page.*--max-tokens [0-9]+ or less"
check_absent "$WORK/wide.html"
check_py "the suggested --max-tokens is the largest that fits in 256 MB" '
import re, sys
fit = int(re.search(r"max-tokens (\d+) or less", open(sys.argv[1]).read()).group(1))
size = lambda T: 16 * 32 * (((T * (T + 1) // 2) * 4 + 2) // 3 * 4 + 1)
assert size(fit) <= 256e6 < size(fit + 1), (fit, size(fit), size(fit + 1))
' "$ERRF"
end

begin "missing flags (usage error)"
run explore --model "$WORK/m" --out "$WORK/x.html"
check_error 2 "required"
end

begin "missing text file: one line, no page"
run explore --model "$WORK/m" --text "$WORK/none.txt" --out "$WORK/x.html"
check_error 1 "none.txt"
check_absent "$WORK/x.html"
end

begin "missing model: one line"
run explore --model "$WORK/nomodel" --text "$WORK/text.txt" --out "$WORK/x.html"
check_error 1 "nomodel"
check_absent "$WORK/x.html"
end

begin "unwritable output: one line, nothing left behind"
run explore --model "$WORK/m" --text "$WORK/text.txt" --out "$WORK/no/such/dir/x.html"
check_error 1 "no such file|directory"
check_no_tmp "$WORK"
end

begin "a failed run leaves an existing page untouched"
cp "$WORK/page.html" "$WORK/keep.html"
run explore --model "$WORK/nomodel" --text "$WORK/text.txt" --out "$WORK/page.html"
check_error 1 "nomodel"
check_same_file "$WORK/page.html" "$WORK/keep.html"
end

finish
