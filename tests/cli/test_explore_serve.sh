#!/usr/bin/env bash
# test_explore_serve.sh: `attnlab explore --serve` and the pages with 1-byte
# display maps (docs/explore.md):
#   - the server listens on 127.0.0.1 only, at the address it prints, and
#     refuses another Host header (DNS rebinding), a missing or wrong token,
#     paths that are not its routes ('..' included), oversized requests,
#     bodies and methods other than GET or HEAD, and more requests than its
#     rate; a HEAD request, answered or refused, gets the head only;
#   - its routes give the exact float32 rows of `attnlab attnmap`'s NPY, display
#     maps within the quantisation's bound, and the statistics of attnmap's JSON;
#   - in headless Chromium (tests/browser/explore_check.py) the served page
#     loads without errors, the tooltip shows the NPY's exact weight, the
#     head grid's thumbnails and the sparsity view are drawn; a head switch is
#     timed;
#   - Ctrl-C stops it cleanly (exit 0, port closed);
#   - a page written with --layer/--head keeps those heads exact and every
#     other one as a display map, and works in the browser too.
# usage: bash tests/cli/test_explore_serve.sh PATH/TO/attnlab WORKDIR
# shellcheck source=tests/cli/lib.sh
. "$(dirname "$0")/lib.sh" "$@"

make_text "$WORK/text.txt" 300

# the decoder of explore_maps.h's lines, for the checks below
MAPS_PY='
import base64, json, sys
import numpy as np
def decode_line(line, T, causal=True):
    """"~M,u|s,f:codes" -> (dense D x D display map, f, signed); exact lines -> (T x T, 1, None)"""
    if not line.startswith("~"):
        v = np.frombuffer(base64.b64decode(line), "<f4")
        P = np.zeros((T, T), np.float32)
        P[np.tril_indices(T)] = v
        return P, 1, None
    head, b64 = line[1:].split(":", 1)
    M, sign, f = head.split(",")
    M, f = float(M), int(f)
    codes = np.frombuffer(base64.b64decode(b64), np.uint8).astype(np.int64)
    D = -(-T // f)
    if sign == "u":
        vals = np.where(codes == 0, 0.0, M * 10.0 ** ((codes - 1) * 7 / 254 - 7))
    else:
        l = np.where(codes > 128, codes - 129, 127 - codes)
        vals = np.where(codes == 128, 0.0, np.sign(codes - 128) * M * 10.0 ** (l * 7 / 126 - 7))
    out = np.zeros((D, D))
    out[np.tril_indices(D)] = vals
    return out, f, sign == "s"
def pool(P, f):
    """the display cells: the pair of largest magnitude in each f x f block"""
    T = P.shape[0]
    D = -(-T // f)
    Q = np.zeros((D * f, D * f), P.dtype)
    Q[:T, :T] = P
    B = Q.reshape(D, f, D, f).transpose(0, 2, 1, 3).reshape(D, D, f * f)
    i = np.abs(B).argmax(-1)
    return np.take_along_axis(B, i[..., None], -1)[..., 0]
'

# raw HTTP requests (the refusals need requests no client library sends)
HTTP_PY='
import socket, sys, time
def req(port, raw):
    """sends raw bytes, returns (status, whole reply)"""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(raw)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return int(data.split(b" ", 2)[1]), data
'

begin "train a tiny model; attnmap gives the reference weights and statistics"
run train --precision f32 --layers 2 --hidden 32 --heads 4 --context 32 --batch 2 --steps 3 --eval-tokens 64 \
    --data "$WORK/text.txt" --out "$WORK/m" --quiet
check_ok
run attnmap --model "$WORK/m" --text "$WORK/text.txt" --layer all --head all --max-tokens 200 --out "$WORK/ref.png"
check_ok
end

# start_server: runs explore --serve in the background; sets SPID, URL, PORT, TOKEN
start_server() {
    "$BIN" explore --model "$WORK/m" --text "$WORK/text.txt" --max-tokens 200 --precision f32 --serve "$@" \
        >"$WORK/serve.out" 2>"$WORK/serve.err" </dev/null &
    SPID=$!
    URL=
    for _ in $(seq 100); do
        URL=$(grep -o 'http://127\.0\.0\.1:[0-9]*/?token=[0-9a-f]*' "$WORK/serve.out" 2>/dev/null || true)
        [ -n "$URL" ] && break
        sleep 0.1
    done
    PORT=$(echo "$URL" | sed -E 's|http://127\.0\.0\.1:([0-9]+)/.*|\1|')
    TOKEN=${URL##*token=}
}

begin "--serve prints its address, listens on 127.0.0.1 only"
start_server
[ -n "$URL" ] || note "no address printed: $(cat "$WORK/serve.out" "$WORK/serve.err")"
check_py "the listening socket is bound to 127.0.0.1, not to every address" '
import sys
port = int(sys.argv[1])
socks = [l.split() for l in open("/proc/net/tcp").read().splitlines()[1:]]
mine = [s[1] for s in socks if s[3] == "0A" and int(s[1].split(":")[1], 16) == port]
assert mine == ["0100007F:%04X" % port], mine
' "${PORT:-0}"
end

begin "security: Host header, token, routes, '..', size, body, method (one request each); HEAD sends heads only"
check_py "refusals" "$HTTP_PY"'
port, token = int(sys.argv[1]), sys.argv[2]
req0 = req
req = lambda raw: req0(port, raw)
host = "127.0.0.1:%d" % port
def get(path, h=host, extra=""):
    return req(("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path, h, extra)).encode())[0]
ok = "/api/map?layer=0&head=1&token=" + token
assert get(ok) == 200
assert get("/?token=" + token) == 200
assert get(ok, "evil.example:%d" % port) == 403, "another Host (DNS rebinding)"
assert get(ok, "localhost:%d" % port) == 403, "a Host other than the printed address"
assert req(("GET %s HTTP/1.1\r\n\r\n" % ok).encode())[0] == 403, "no Host"
assert get("/api/map?layer=0&head=1") == 403, "no token"
assert get("/api/map?layer=0&head=1&token=" + "0" * 32) == 403, "wrong token"
assert get("/?token=" + token[:-1]) == 403, "short token"
assert get("/api/map?layer=0&head=1&token=" + token + "x") == 403, "long token"
for p in ("/../../../../etc/passwd", "/api/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..", "/api/map/..",
          "//etc/passwd", "/etc/passwd", "/explore.js", "/CMakeLists.txt"):
    st = get(p + "?token=" + token)
    assert st == 404, (p, st)
for p in ("/api/map?layer=2&head=0", "/api/map?layer=-1&head=0", "/api/map?layer=0&head=4", "/api/map?layer=0x1&head=0",
          "/api/row?layer=0&head=0&q=200", "/api/row?layer=0&head=0", "/api/layer?layer=9"):
    st = get(p + "&token=" + token)
    assert st == 400, (p, st)
st, body = req(("GET %s HTTP/1.1\r\nHost: %s\r\nX-Pad: %s\r\n\r\n" % (ok, host, "a" * 9000)).encode())
assert st == 431, ("oversized head", st)
assert get(ok, extra="Content-Length: 5\r\n") == 413, "a body"
assert get(ok, extra="Transfer-Encoding: chunked\r\n") == 413, "a chunked body"
assert req(("POST %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (ok, host)).encode())[0] == 405, "POST"
assert req(b"garbage\r\n\r\n")[0] == 400, "no request line"
assert get("/favicon.ico") == 204, "the browser icon is empty, no token needed"
def head_of(raw):
    """(status, Content-Length, bytes after the head) of a reply"""
    st, data = req(raw)
    top, _, rest = data.partition(b"\r\n\r\n")
    length = [int(l.split(b":")[1]) for l in top.split(b"\r\n") if l.lower().startswith(b"content-length:")]
    return st, length[0], rest
st, n_get, body = head_of(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (ok, host)).encode())
assert st == 200 and n_get == len(body) > 0, (st, n_get, len(body))
st, n, rest = head_of(("HEAD %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (ok, host)).encode())
assert (st, n, rest) == (200, n_get, b""), ("HEAD: the head of the GET reply, no body", st, n, rest[:40])
st, n, rest = head_of(("HEAD /api/map?layer=0&head=1 HTTP/1.1\r\nHost: %s\r\n\r\n" % host).encode())
assert st == 403 and n > 0 and rest == b"", ("a refused HEAD: its head only", st, n, rest[:40])
' "$PORT" "$TOKEN"
end

begin "the routes: exact rows equal the NPY, display maps within 3.3 %, statistics equal attnmap's"
check_py "data" "$MAPS_PY"'
import urllib.request
port, token, ref = int(sys.argv[1]), sys.argv[2], sys.argv[3]
P = np.load(ref + ".npy")
J = json.load(open(ref + ".json"))
T = P.shape[1]
def get(path):
    return urllib.request.urlopen("http://127.0.0.1:%d%s&token=%s" % (port, path, token), timeout=30).read()
for pair, (l, h) in enumerate([(0, 0), (0, 3), (1, 2), (1, 1)]):
    ref_head = P[l * 4 + h]
    for q in (0, 1, 57, 199):
        row = np.frombuffer(base64.b64decode(get("/api/row?layer=%d&head=%d&q=%d" % (l, h, q))), "<f4")
        assert row.size == q + 1 and np.array_equal(row, ref_head[q, :q + 1]), (l, h, q)
    m, f, signed = decode_line(get("/api/map?layer=%d&head=%d" % (l, h)).decode(), T)
    assert f == 1 and m.shape == (T, T) and signed is False
    keep = ref_head >= 1e-7 * ref_head.max()
    rel = np.abs(m[keep] - ref_head[keep]) / ref_head[keep]
    assert rel.max() <= 0.0323, rel.max()
    assert np.all(m[~keep] == 0)
for l in (0, 1):
    o = json.loads(get("/api/layer?layer=%d" % l))
    assert o["layer"] == l and len(o["stats"]) == 4 and len(o["thumbs"]) == 4
    for h in range(4):
        s, r = o["stats"][h], [p for p in J["pairs"] if p["layer"] == l and p["head"] == h][0]
        for k in ("sink_mass", "entropy", "mean_distance", "topk_mass", "budget95", "budget95_frac"):
            assert abs(s[k] - r[k]) <= 1e-5 * max(1, abs(r[k])), (l, h, k, s[k], r[k])
        t, f, _ = decode_line(o["thumbs"][h], T)
        assert f == -(-T // 64) and t.shape == (-(-T // f),) * 2
        pooled = pool(P[l * 4 + h], f)
        keep = pooled >= 1e-7 * pooled.max()
        assert np.all(np.abs(t[keep] - pooled[keep]) <= 0.0323 * pooled[keep]), (l, h)
' "$PORT" "$TOKEN" "$WORK/ref"
end

begin "rate limit: a burst beyond the rate gets 429, and service resumes"
check_py "rate" "$HTTP_PY"'
port, token = int(sys.argv[1]), sys.argv[2]
def get(path):
    return req(port, ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (path, port)).encode())[0]
time.sleep(2.5)  # the checks above drew on the bucket: let it refill to its full burst (2 s at the rate)
codes = [get("/favicon.ico") for _ in range(1200)]
assert 429 in codes, "1200 requests at once were all served"
assert codes.count(204) >= 400, codes.count(204)
time.sleep(2.5)
assert get("/api/map?layer=0&head=0&token=" + token) == 200, "no service after the burst"
' "$PORT" "$TOKEN"
end


# BROWSER_PY: the checks on a report shared by the served page and the file
BROWSER_PY="$MAPS_PY"'
o = json.load(open(sys.argv[1]))
P = np.load(sys.argv[2] + ".npy")
assert o["ready"], o.get("error_text")
assert not o["errors"], o["errors"]
assert not o["network_requests"], o["network_requests"]
assert o["state"] == {"layer": 1, "head": 2, "scale": "log"}, o["state"]
w = P[1 * 4 + 2, 150, 31]
assert o["tip"]["q"] == "150" and o["tip"]["k"] == "31", o["tip"]
assert o["tip"]["w"] == "%.6g" % w or float(o["tip"]["w"]) == float("%.6g" % w), (o["tip"]["w"], w)
assert o["tip_masked"]["w"] == "masked"
assert o["pixels_log"]["nonwhite"] > 0.4 * o["pixels_log"]["pixels"] and o["pixels_log"]["colours"] > 8
assert o["pixels_thumbs"]["nonwhite"] > 0.25 * o["pixels_thumbs"]["pixels"], o["pixels_thumbs"]
assert o["pixels_thumbs"]["colours"] > 16, o["pixels_thumbs"]
assert o["pixels_sparsity"]["nonwhite"] > 0.05 * o["pixels_sparsity"]["pixels"], o["pixels_sparsity"]
assert "95 %" in o["sparsity_note"] and "so far" not in o["sparsity_note"], o["sparsity_note"]
assert o["state_after_sim_click"]["head"] == 1
'

begin "Chromium on the served page: exact hover weight, thumbnails, sparsity view, no errors"
if browser_check "$WORK/served.json" --page "$URL" --layer 1 --head 2 --cell 150,31 --masked 3,9 --sim 0,1 \
    --exact-hover --switch "0,0;0,1;1,3;1,0" --screenshot "$WORK/served.png"; then
    check_py "served page" "$BROWSER_PY"'
assert o["server_requests"], "the served page fetched nothing"
assert all(r.startswith("http://127.0.0.1:") for r in o["server_requests"])
assert len(o["switch_ms"]) == 4 and all(0 < t < 10000 for t in o["switch_ms"]), o["switch_ms"]
print("head switches (ms):", o["switch_ms"], file=sys.stderr)
' "$WORK/served.json" "$WORK/ref"
fi
end

begin "Ctrl-C stops the server cleanly"
kill -INT "$SPID"
for _ in $(seq 50); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SPID" 2>/dev/null; then
    note "still running 5 s after SIGINT"
    kill -KILL "$SPID"
fi
wait "$SPID"
[ $? -eq 0 ] || note "exit status not 0 after SIGINT"
grep -q "^stopped: .* requests answered" "$WORK/serve.out" || note "no closing line"
[ ! -s "$WORK/serve.err" ] || note "stderr: $(head -c 300 "$WORK/serve.err")"
check_py "the port is closed" '
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    raise SystemExit("still accepting connections")
except ConnectionRefusedError:
    pass
' "$PORT"
end

begin "--serve: flag errors (usage errors, exit 2)"
run explore --model "$WORK/m" --text "$WORK/text.txt" --serve --out "$WORK/x.html"
check_error 2 "serve"
run explore --model "$WORK/m" --text "$WORK/text.txt" --port 8080 --out "$WORK/x.html"
check_error 2 "port"
run explore --model "$WORK/m" --text "$WORK/text.txt" --serve --port 70000
check_error 2 "port"
run explore --model "$WORK/m" --text "$WORK/text.txt" --out "$WORK/x.html" --layer 5
check_error 2 "layer"
run explore --model "$WORK/m" --text "$WORK/text.txt" --out "$WORK/x.html" --head a
check_error 2 "head"
end

begin "a port in use fails at once, before the forward (one line, exit 1)"
"$PY" -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)" >"$WORK/busy.port" &
BUSY=$!
for _ in $(seq 50); do [ -s "$WORK/busy.port" ] && break; sleep 0.1; done
run explore --model "$WORK/m" --text "$WORK/text.txt" --serve --port "$(cat "$WORK/busy.port")"
check_error 1 "cannot listen on 127.0.0.1:[0-9]+"
[ ! -s "$OUTF" ] || note "it printed before failing (the forward ran?): $(head -c 200 "$OUTF")"
kill "$BUSY" 2>/dev/null
wait "$BUSY" 2>/dev/null
end

begin "a page with --layer/--head: those heads exact, the others 1-byte maps within 3.3 %"
run explore --model "$WORK/m" --text "$WORK/text.txt" --max-tokens 200 --layer 1 --head 2 --out "$WORK/q.html"
check_ok
check_stdout "1 exact"
check_py "lines" "$MAPS_PY"'
import re
html = open(sys.argv[1], encoding="utf-8").read()
lines = [l for l in re.search(r"id=\"al-weights\">\n(.*?)</script>", html, re.S).group(1).split("\n") if l]
P = np.load(sys.argv[2] + ".npy")
T = P.shape[1]
assert len(lines) == 8
for i, line in enumerate(lines):
    m, f, signed = decode_line(line, T)
    if i == 1 * 4 + 2:
        assert f == 1 and signed is None and np.array_equal(m, P[i]), "the named head is exact"
        continue
    assert line.startswith("~") and f == 1
    keep = P[i] >= 1e-7 * P[i].max()
    assert np.all(np.abs(m[keep] - P[i][keep]) <= 0.0323 * P[i][keep]), i
for pat in (r"fetch\(", r"XMLHttpRequest", r"attnlabServer = "):
    assert not re.search(pat, html), "the file carries the server transport: " + pat
' "$WORK/q.html" "$WORK/ref"
end

begin "Chromium on that page: exact hover on the named head, thumbnails, sparsity, no errors"
if browser_check "$WORK/q.json" --page "$WORK/q.html" --layer 1 --head 2 --cell 150,31 --masked 3,9 --sim 0,1 \
    --screenshot "$WORK/q.png"; then
    check_py "file page" "$BROWSER_PY" "$WORK/q.json" "$WORK/ref"
fi
if browser_check "$WORK/q01.json" --page "$WORK/q.html" --layer 0 --head 1 --cell 150,31 --sim 0,1; then
    check_py "a quantised head: the tooltip says so and is within 3.3 % of the NPY" '
import json, sys
import numpy as np
o = json.load(open(sys.argv[1]))
w = float(np.load(sys.argv[2] + ".npy")[0 * 4 + 1, 150, 31])
assert o["ready"] and not o["errors"], o["errors"]
t = o["tip"]["w"]
assert t.startswith("\u2248 "), t
assert abs(float(t[2:]) - w) <= 0.0331 * w, (t, w)
' "$WORK/q01.json" "$WORK/ref"
fi
end

begin "a large page is made to fit: 8 x 32 heads over 1024 tokens with none exact, 2 x 2 pairs a cell"
run train --precision f32 --layers 8 --hidden 64 --heads 32 --context 32 --batch 2 --steps 1 --eval-tokens 64 \
    --data "$WORK/text.txt" --out "$WORK/wide" --quiet
check_ok
run explore --model "$WORK/wide" --text "$WORK/text.txt" --max-tokens 1024 --layer none --threads 1 --out "$WORK/wide.html"
check_ok
check_stdout "0 exact .* 512 x 512 display maps"
check_py "size" '
import os, sys
size = os.path.getsize(sys.argv[1])
assert 20e6 < size <= 150e6, size
' "$WORK/wide.html"
end

finish
