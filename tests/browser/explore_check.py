#!/usr/bin/env python3
"""explore_check.py: drives a page written by `attnlab explore` in headless
Chromium through the DevTools protocol and prints what it saw as JSON.

Used by tests/cli/test_explore.sh; the checks against the model's numbers are
made there. Standard library only: the protocol runs over
--remote-debugging-pipe (NUL-separated JSON on file descriptors 3 and 4), so
neither npm packages nor a network port are needed.

What it does, in one fresh browser profile:
  - opens file://PAGE#layer=L&head=H at 1400 x 1100 CSS pixels, device scale 1;
  - records page exceptions, console errors, log errors and every request
    that is not file:, data:, blob: or about:;
  - reads the heatmap's pixels (non-white count, distinct colours, checksum);
  - moves the mouse (real input events) over cell (Q, K) and reads the
    tooltip; likewise over a masked cell (K2 > Q2) when given;
  - clicks the "linear" radio button, reads the pixels and the tooltip again;
  - hovers and clicks similarity cell (I, J) and reads the selected head;
  - hovers the text character Q and reads the tooltip;
  - reads the pixels of the layer's head grid (thumbnails) and of the
    sparsity view;
  - saves a screenshot when asked.
A page served by `attnlab explore --serve` is given as its URL (--page
http://127.0.0.1:PORT/?token=...): requests to that origin are then allowed
(listed in server_requests), the driver waits for the page's requests to
finish after each step, waits for the tooltip's exact weight (fetched from
the server) when --exact-hover is given, times head switches (--switch
L,H;L,H;...: milliseconds from the selection to the drawn map, the
statistics and thumbnails fetched), and asks the page to compute every
layer's statistics for the sparsity view.

usage: explore_check.py --chromium PATH --page FILE.html|URL --layer L --head H
                        --cell Q,K [--masked Q,K] --sim I,J [--exact-hover]
                        [--switch L,H;...] [--screenshot PNG]
"""
import argparse
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
         "--remote-debugging-pipe"]


class CDP:
    """A DevTools protocol connection over Chromium's debugging pipe."""

    def __init__(self, chromium, timeout):
        self.deadline = time.time() + timeout
        self.profile = tempfile.mkdtemp(prefix="explore-check-")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # the browser reads commands on fd 3 and writes replies on fd 4
        hi_r = os.dup(to_child_r)
        hi_w = os.dup(from_child_w)

        def remap():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.proc = subprocess.Popen([chromium] + FLAGS + ["--user-data-dir=" + self.profile, "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=remap, close_fds=False)
        for fd in (to_child_r, from_child_w, hi_r, hi_w):
            os.close(fd)
        self.w, self.r = to_child_w, from_child_r
        self.buf = b""
        self.next_id = 0
        self.replies = {}
        self.events = []

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.w, self.r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _pump(self, wait):
        """Reads whatever the browser sent within `wait` seconds."""
        ready, _, _ = select.select([self.r], [], [], wait)
        if not ready:
            return
        chunk = os.read(self.r, 1 << 20)
        if not chunk:
            raise RuntimeError("chromium closed the debugging pipe (exit status %s)" % self.proc.poll())
        self.buf += chunk
        while b"\0" in self.buf:
            msg, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(msg)
            if "id" in m:
                self.replies[m["id"]] = m
            else:
                self.events.append(m)

    def call(self, method, params=None, session=None, timeout=None):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        end = min(self.deadline, time.time() + (timeout or 30))
        while mid not in self.replies:
            if time.time() > end:
                raise RuntimeError("no reply to %s in time" % method)
            self._pump(0.1)
        r = self.replies.pop(mid)
        if "error" in r:
            raise RuntimeError("%s: %s" % (method, r["error"].get("message")))
        return r.get("result", {})

    def wait_event(self, method, timeout=20):
        end = min(self.deadline, time.time() + timeout)
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            if time.time() > end:
                raise RuntimeError("no %s event in time" % method)
            self._pump(0.1)


class Page:
    """One tab of the browser, attached in flat mode."""

    def __init__(self, cdp):
        self.cdp = cdp
        tid = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.s = cdp.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1100, "deviceScaleFactor": 1, "mobile": False})

    def call(self, method, params=None):
        return self.cdp.call(method, params, self.s)

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError("evaluating %r: %s" % (expr[:60], d.get("exception", {}).get("description", d.get("text"))))
        return r["result"].get("value")

    def mouse(self, kind, x, y, button="none", clicks=0):
        self.call("Input.dispatchMouseEvent",
                  {"type": kind, "x": x, "y": y, "button": button, "clickCount": clicks})

    def click(self, x, y):
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, "left", 1)
        self.mouse("mouseReleased", x, y, "left", 1)


PIXELS = """(function () {
  var c = document.getElementById('map'), cr = c.getBoundingClientRect(), r = attnlabExplore.mapRect();
  var s = c.width / cr.width, x0 = Math.round((r.x - cr.left) * s), y0 = Math.round((r.y - cr.top) * s);
  var n = Math.round(r.size * s), d = c.getContext('2d').getImageData(x0, y0, n, n).data;
  var nonwhite = 0, colours = new Set(), h = 0;
  for (var i = 0; i < d.length; i += 4) {
    if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) nonwhite++;
    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    h = (Math.imul(h, 31) + d[i] * 65536 + d[i + 1] * 256 + d[i + 2]) >>> 0;
  }
  return {pixels: n * n, nonwhite: nonwhite, colours: colours.size, checksum: h};
})()"""

def canvas_pixels(cid):
    """non-white count and distinct colours of a whole canvas"""
    return """(function () {
  var c = document.getElementById('%s'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  var nonwhite = 0, colours = new Set();
  for (var i = 0; i < d.length; i += 4) {
    if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) nonwhite++;
    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
  }
  return {pixels: c.width * c.height, nonwhite: nonwhite, colours: colours.size};
})()""" % cid


IDLE = "(window.attnlabExplore && attnlabExplore.idle ? attnlabExplore.idle() : null)"

TIP = """(function () {
  var t = document.getElementById('tip'), g = function (id) { var e = document.getElementById(id); return e ? e.textContent : null; };
  return {hidden: t.hidden, text: t.textContent, q: g('tip-q'), qc: g('tip-qc'), k: g('tip-k'), kc: g('tip-kc'),
          w: g('tip-w'), s: g('tip-s'), heads: g('tip-heads')};
})()"""


def pair(s):
    a, b = s.split(",")
    return int(a), int(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--page", required=True)
    ap.add_argument("--layer", type=int, default=0)
    ap.add_argument("--head", type=int, default=0)
    ap.add_argument("--cell", type=pair, required=True)
    ap.add_argument("--masked", type=pair)
    ap.add_argument("--sim", type=pair, required=True)
    ap.add_argument("--screenshot")
    ap.add_argument("--exact-hover", action="store_true")
    ap.add_argument("--switch", default="")
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()

    out = {}
    cdp = CDP(a.chromium, a.timeout)
    try:
        page = Page(cdp)
        served = a.page.startswith("http://")
        origin = a.page.split("/?")[0] if served else None
        url = (a.page if served else "file://" + os.path.abspath(a.page)) + "#layer=%d&head=%d" % (a.layer, a.head)
        t0 = time.time()
        page.call("Page.navigate", {"url": url})
        cdp.wait_event("Page.loadEventFired", 30)
        while not page.eval("!!(document.body && document.body.dataset.ready === '1')"):
            if time.time() - t0 > 30:
                break
            time.sleep(0.05)
        out["ready"] = page.eval("!!(document.body && document.body.dataset.ready === '1')")
        out["load_seconds"] = round(time.time() - t0, 3)
        out["title"] = page.eval("document.title")
        out["error_text"] = page.eval("document.getElementById('error').textContent")
        if out["ready"]:
            out["state"] = page.eval("attnlabExplore.state()")
            out["pixels_log"] = page.eval(PIXELS)
            q, k = a.cell
            c = page.eval("attnlabExplore.cellCenter(%d, %d)" % (q, k))
            page.mouse("mouseMoved", c["x"], c["y"])
            out["tip"] = page.eval(TIP)
            t1 = time.time()
            while a.exact_hover and (out["tip"]["w"] or "\u2248").startswith("\u2248") and time.time() - t1 < 10:
                time.sleep(0.05)
                out["tip"] = page.eval(TIP)
            if a.masked:
                m = page.eval("attnlabExplore.cellCenter(%d, %d)" % a.masked)
                page.mouse("mouseMoved", m["x"], m["y"])
                out["tip_masked"] = page.eval(TIP)
            # the "linear" radio button, clicked like a user would
            r = page.eval("(function () { var r = document.getElementById('scale-linear').getBoundingClientRect();"
                          " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()")
            page.click(r["x"], r["y"])
            out["state_after_linear"] = page.eval("attnlabExplore.state()")
            out["pixels_linear"] = page.eval(PIXELS)
            page.mouse("mouseMoved", c["x"], c["y"])
            out["tip_linear"] = page.eval(TIP)
            i, j = a.sim
            s = page.eval("attnlabExplore.simCellCenter(%d, %d)" % (i, j))
            page.mouse("mouseMoved", s["x"], s["y"])
            out["tip_sim"] = page.eval(TIP)
            page.click(s["x"], s["y"])
            page.eval(IDLE)
            out["state_after_sim_click"] = page.eval("attnlabExplore.state()")
            out["head_select_after_sim_click"] = page.eval("document.getElementById('head').value")
            out["stats_title_after_sim_click"] = page.eval("document.getElementById('statstitle').textContent")
            t = page.eval("(function () { var e = document.querySelector('#text span[data-i=\"%d\"]');"
                          " e.scrollIntoView({block: 'center'}); var r = e.getBoundingClientRect();"
                          " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()" % q)
            page.mouse("mouseMoved", t["x"], t["y"])
            out["tip_text"] = page.eval(TIP)
            page.eval(IDLE)
            out["pixels_thumbs"] = page.eval(canvas_pixels("thumbs"))
            out["switch_ms"] = []
            for lh in [x for x in a.switch.split(";") if x]:
                l, h = pair(lh)
                out["switch_ms"].append(page.eval(
                    "(async function () { var t = performance.now(); await attnlabExplore.select(%d, %d);"
                    " await attnlabExplore.idle(); return performance.now() - t; })()" % (l, h)))
            page.eval("attnlabExplore.loadAllLayers ? attnlabExplore.loadAllLayers() : null")
            page.eval(IDLE)
            out["pixels_sparsity"] = page.eval(canvas_pixels("sparsity"))
            out["sparsity_note"] = page.eval("document.getElementById('sparsitynote').textContent")
            if a.switch:  # back to the head the checks above looked at
                page.eval("attnlabExplore.select(%d, %d)" % (a.layer, a.head))
                page.eval(IDLE)
            page.eval("window.scrollTo(0, 0)")
            page.mouse("mouseMoved", c["x"], c["y"])  # leave the page as a user would see it while hovering
        if a.screenshot:
            shot = page.call("Page.captureScreenshot", {"format": "png"})
            with open(a.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
    finally:
        events = list(cdp.events)
        cdp.close()
    errors, requests, server_requests = [], [], []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errors.append("exception: " + d.get("exception", {}).get("description", d.get("text", "?")))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console.%s: %s" % (p["type"], " ".join(str(x.get("value", x.get("description")))
                                                                   for x in p.get("args", []))))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", "?"))
        elif m == "Network.requestWillBeSent":
            u = p.get("request", {}).get("url", "")
            if origin and u.startswith(origin + "/"):
                server_requests.append(u)
            elif not u.split(":", 1)[0] in ("file", "data", "blob", "about"):
                requests.append(u)
    out["errors"] = errors
    out["network_requests"] = requests
    out["server_requests"] = server_requests
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
