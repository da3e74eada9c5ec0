/*
 * explore_html.c: writes the explorer page of explore_html.h: fixed page text
 * (head, styles, body skeleton), one base64 line of float32 weights per head,
 * a JSON data object, and the script that draws everything.
 *
 * The page text lives below as arrays of C string literals, one per line of
 * HTML, CSS or JavaScript. It is kept ASCII (non-ASCII characters are written
 * as JavaScript \u escapes) and no literal comes near the string lengths every
 * C compiler must accept. Data that comes from outside (paths, titles) only
 * ever enters the page inside the JSON object, with '<', '>' and '&' escaped
 * so that nothing in it can close the script element it sits in.
 */
#include "explore_html.h"

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnlab.h"
#include "../plot/colormap.h"

/* ---- BEGIN page text (HTML, CSS and JavaScript; one literal per line) ---- */
/* Document head, styles and body skeleton, up to the opening of the weights element. */
static const char *const PAGE_HEAD[] = {
    "<!DOCTYPE html>\n",
    "<html lang=\"en\">\n",
    "<head>\n",
    "<meta charset=\"utf-8\">\n",
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
    "<title>attnlab explore</title>\n",
    "<style>\n",
    "body { font-family: \"DejaVu Sans\", \"Helvetica Neue\", Arial, sans-serif; font-size: 14px; color: #222;\n",
    "       background: #fff; margin: 16px 20px; }\n",
    "h1 { font-size: 19px; margin: 0 0 2px 0; }\n",
    "h2 { font-size: 14px; margin: 14px 0 6px 0; }\n",
    "#subtitle, .note { color: #555; font-size: 12.5px; }\n",
    "#controls { display: flex; flex-wrap: wrap; gap: 18px; align-items: center; margin: 12px 0 8px 0;\n",
    "            padding: 8px 10px; background: #f3f4f6; border-radius: 6px; }\n",
    "#controls select { font-size: 14px; padding: 1px 4px; }\n",
    "#controls .hint { color: #666; font-size: 12.5px; }\n",
    "#main { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }\n",
    "#mapbox h2 { text-align: center; margin-top: 4px; }\n",
    "canvas { display: block; }\n",
    "#map { cursor: crosshair; }\n",
    "#sim { cursor: pointer; }\n",
    "aside { min-width: 320px; max-width: 460px; }\n",
    "table { border-collapse: collapse; font-size: 13px; }\n",
    "td, th { padding: 2px 8px; text-align: right; }\n",
    "th { font-weight: 600; border-bottom: 1px solid #ccc; }\n",
    "td:first-child, th:first-child { text-align: left; }\n",
    "#stats td:first-child { color: #444; }\n",
    "#heads tbody tr { cursor: pointer; }\n",
    "#heads tbody tr:hover { background: #eef3fb; }\n",
    "#heads tr.current { background: #dde8f8; font-weight: 600; }\n",
    "#tip { position: fixed; pointer-events: none; background: rgba(255, 255, 255, 0.96); border: 1px solid #888;\n",
    "       border-radius: 4px; padding: 5px 8px; font-size: 13px; line-height: 1.45; white-space: nowrap;\n",
    "       box-shadow: 0 1px 4px rgba(0, 0, 0, 0.25); z-index: 10; }\n",
    "#tip .v { font-family: \"DejaVu Sans Mono\", Menlo, Consolas, monospace; }\n",
    "#textbox { margin-top: 14px; max-width: 1100px; }\n",
    "#text { font-family: \"DejaVu Sans Mono\", Menlo, Consolas, monospace; font-size: 13px; line-height: 1.7;\n",
    "        white-space: pre-wrap; word-break: break-all; border: 1px solid #ddd; border-radius: 4px;\n",
    "        padding: 6px 8px; max-height: 260px; overflow-y: auto; }\n",
    "#text span { border-radius: 2px; }\n",
    "#text span.q { outline: 2px solid #d62728; }\n",
    "#text span.k { outline: 2px solid #1f77b4; }\n",
    "#text span.ctl { color: #999; }\n",
    "footer { margin-top: 18px; color: #666; font-size: 12px; max-width: 1100px; line-height: 1.5; }\n",
    "#error { color: #b00; font-weight: 600; }\n",
    "</style>\n",
    "</head>\n",
    "<body>\n",
    "<h1 id=\"title\">attnlab explore</h1>\n",
    "<div id=\"subtitle\"></div>\n",
    "<div id=\"error\"></div>\n",
    "<div id=\"controls\">\n",
    "  <label>Layer <select id=\"layer\"></select></label>\n",
    "  <label>Head <select id=\"head\"></select></label>\n",
    "  <span>Scale\n",
    "    <label><input type=\"radio\" name=\"scale\" id=\"scale-log\" value=\"log\" checked> log</label>\n",
    "    <label><input type=\"radio\" name=\"scale\" id=\"scale-linear\" value=\"linear\"> linear</label></span>\n",
    "  <span class=\"hint\">Hover the map or the text for weights; click a cell of the similarity matrix to show that head.</span>\n",
    "</div>\n",
    "<div id=\"main\">\n",
    "  <section id=\"mapbox\">\n",
    "    <h2 id=\"maptitle\">Layer 0 Head 0</h2>\n",
    "    <canvas id=\"map\" width=\"600\" height=\"560\"></canvas>\n",
    "    <div class=\"note\" id=\"scalenote\"></div>\n",
    "  </section>\n",
    "  <aside>\n",
    "    <h2 id=\"statstitle\">Head statistics</h2>\n",
    "    <table id=\"stats\"></table>\n",
    "    <h2 id=\"simtitle\">Head similarity</h2>\n",
    "    <canvas id=\"sim\" width=\"300\" height=\"260\"></canvas>\n",
    "    <div class=\"note\" id=\"simnote\"></div>\n",
    "    <h2 id=\"headstitle\">Heads of this layer</h2>\n",
    "    <table id=\"heads\"></table>\n",
    "  </aside>\n",
    "</div>\n",
    "<section id=\"textbox\">\n",
    "  <h2>Text</h2>\n",
    "  <div class=\"note\" id=\"textnote\">Shading: the weights of the hovered query over its keys (darker is more).\n",
    "    Red box: query; blue box: key.</div>\n",
    "  <div id=\"text\"></div>\n",
    "</section>\n",
    "<div id=\"tip\" hidden></div>\n",
    "<footer id=\"footer\"></footer>\n",
    "<script type=\"text/plain\" id=\"al-weights\">\n",
    NULL,
};

/* The page's script: reads the two data elements and draws everything; no network. */
static const char *const PAGE_SCRIPT[] = {
    "'use strict';\n",
    "/* attnlab explore: draws one head's weights, its statistics and its layer's\n",
    " * head similarity from the data embedded above; nothing is fetched. */\n",
    "(function () {\n",
    "  var $ = function (id) { return document.getElementById(id); };\n",
    "  var D, LINES, L, H, T, CAUSAL, VIR, RDY;\n",
    "  var state = { layer: 0, head: 0, scale: 'log', q: -1, k: -1 };\n",
    "  var cache = new Map();\n",
    "  var geo = null, simGeo = null;\n",
    "  var SUP = { '-': '\\u207b', '0': '\\u2070', '1': '\\u00b9', '2': '\\u00b2', '3': '\\u00b3', '4': '\\u2074',\n",
    "              '5': '\\u2075', '6': '\\u2076', '7': '\\u2077', '8': '\\u2078', '9': '\\u2079' };\n",
    "  var FONT = '\"DejaVu Sans\", \"Helvetica Neue\", Arial, sans-serif';\n",
    "\n",
    "  /* 768 hex bytes -> Uint8Array of 256 rgb triples */\n",
    "  function lut(hex) {\n",
    "    var a = new Uint8Array(768);\n",
    "    for (var i = 0; i < 768; i++) a[i] = parseInt(hex.substr(2 * i, 2), 16);\n",
    "    return a;\n",
    "  }\n",
    "\n",
    "  /* matplotlib's lookup: index floor(t * 256), 1.0 -> 255, under -> 0, over -> 255 */\n",
    "  function lutIndex(t) {\n",
    "    if (!(t < 1)) return 255;\n",
    "    if (t < 0) return 0;\n",
    "    var i = Math.floor(t * 256);\n",
    "    return i > 255 ? 255 : i;\n",
    "  }\n",
    "\n",
    "  /* The weights of (layer, head) as a Float32Array, decoded on first use;\n",
    "   * the 16 most recently used heads stay decoded. */\n",
    "  function weights(l, h) {\n",
    "    var key = l * H + h;\n",
    "    if (cache.has(key)) {\n",
    "      var w = cache.get(key);\n",
    "      cache.delete(key);\n",
    "      cache.set(key, w);\n",
    "      return w;\n",
    "    }\n",
    "    var bin = atob(LINES[key]), n = bin.length, bytes = new Uint8Array(n);\n",
    "    for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);\n",
    "    var dv = new DataView(bytes.buffer), out = new Float32Array(n >> 2);\n",
    "    for (var j = 0; j < out.length; j++) out[j] = dv.getFloat32(4 * j, true);\n",
    "    cache.set(key, out);\n",
    "    if (cache.size > 16) cache.delete(cache.keys().next().value);\n",
    "    return out;\n",
    "  }\n",
    "\n",
    "  /* weight of query q on key k, or null where the mask hides the pair */\n",
    "  function value(W, q, k) {\n",
    "    if (CAUSAL) return k > q ? null : W[q * (q + 1) / 2 + k];\n",
    "    return W[q * T + k];\n",
    "  }\n",
    "\n",
    "  function stats(l, h) { return D.stats[l][h]; }\n",
    "\n",
    "  /* The colour scale of the current head: log 1e-6..1 on viridis, or linear\n",
    "   * 0..max on viridis (symmetric on RdYlBu_r when the head has negative weights). */\n",
    "  function currentNorm() {\n",
    "    var s = stats(state.layer, state.head);\n",
    "    if (state.scale === 'log') return { log: true, lo: 1e-6, hi: 1, lut: VIR, name: 'viridis' };\n",
    "    var lo = s.min, hi = s.max;\n",
    "    if (lo !== null && lo < 0) {\n",
    "      var m = Math.max(-lo, hi > 0 ? hi : 0) || 1;\n",
    "      return { log: false, lo: -m, hi: m, lut: RDY, name: 'RdYlBu_r' };\n",
    "    }\n",
    "    return { log: false, lo: 0, hi: hi > 0 ? hi : 1, lut: VIR, name: 'viridis' };\n",
    "  }\n",
    "\n",
    "  /* position along the colour map, or NaN for \"bad\" (background) */\n",
    "  function normT(n, v) {\n",
    "    if (v === null || isNaN(v)) return NaN;\n",
    "    if (n.log) return v > 0 ? (Math.log10(v) - Math.log10(n.lo)) / (Math.log10(n.hi) - Math.log10(n.lo)) : NaN;\n",
    "    return (v - n.lo) / (n.hi - n.lo);\n",
    "  }\n",
    "\n",
    "  function fmtW(w) {\n",
    "    if (w === null) return 'masked';\n",
    "    if (w === 0) return '0';\n",
    "    var a = Math.abs(w);\n",
    "    return a >= 1e-3 && a < 1e4 ? w.toPrecision(6) : w.toExponential(5);\n",
    "  }\n",
    "\n",
    "  function fmt(v, d) { return v === null || v === undefined ? 'n/a' : v.toFixed(d); }\n",
    "\n",
    "  function pow10(e) {\n",
    "    var s = String(e), r = '10';\n",
    "    for (var i = 0; i < s.length; i++) r += SUP[s[i]];\n",
    "    return r;\n",
    "  }\n",
    "\n",
    "  /* byte -> how the tooltip names it */\n",
    "  function chName(b) {\n",
    "    if (b === 32) return \"' '\";\n",
    "    if (b === 10) return \"'\\\\n'\";\n",
    "    if (b === 9) return \"'\\\\t'\";\n",
    "    if (b === 13) return \"'\\\\r'\";\n",
    "    if (b > 32 && b < 127) return \"'\" + String.fromCharCode(b) + \"'\";\n",
    "    return \"'\\\\x\" + (b < 16 ? '0' : '') + b.toString(16) + \"'\";\n",
    "  }\n",
    "  /* position i's token for the tooltips: its byte, or a tokenizer's piece (already escaped) */\n",
    "  function tokName(i) { return D.pieces ? \"'\" + D.pieces[i] + \"'\" : chName(D.bytes[i]); }\n",
    "\n",
    "  /* ticks every 1, 2 or 5 x 10^k cells, at least minPx apart */\n",
    "  function tickStep(pxPerCell, minPx) {\n",
    "    for (var p = 1; ; p *= 10) {\n",
    "      var c = [1, 2, 5];\n",
    "      for (var i = 0; i < 3; i++) if (c[i] * p * pxPerCell >= minPx) return c[i] * p;\n",
    "    }\n",
    "  }\n",
    "\n",
    "  /* nice values in [lo, hi] for a linear colour bar */\n",
    "  function niceTicks(lo, hi, n) {\n",
    "    var raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw))), st = p;\n",
    "    [1, 2, 2.5, 5, 10].some(function (m) { st = m * p; return m * p >= raw; });\n",
    "    var out = [];\n",
    "    for (var v = Math.ceil(lo / st - 1e-9) * st; v <= hi + st * 1e-9; v += st) out.push(Math.abs(v) < st * 1e-9 ? 0 : v);\n",
    "    return out;\n",
    "  }\n",
    "\n",
    "  function tickLabel(v) { return String(parseFloat(v.toPrecision(4))); }\n",
    "\n",
    "  /* Canvas sized in CSS pixels, drawn sharp on high-density screens. */\n",
    "  function setupCanvas(c, w, h) {\n",
    "    var r = window.devicePixelRatio || 1;\n",
    "    c.width = Math.round(w * r);\n",
    "    c.height = Math.round(h * r);\n",
    "    c.style.width = w + 'px';\n",
    "    c.style.height = h + 'px';\n",
    "    var ctx = c.getContext('2d');\n",
    "    ctx.setTransform(r, 0, 0, r, 0, 0);\n",
    "    ctx.fillStyle = '#ffffff';\n",
    "    ctx.fillRect(0, 0, w, h);\n",
    "    return ctx;\n",
    "  }\n",
    "\n",
    "  /* Vertical colour bar at (x, y), w x h, with labelled ticks (value, label). */\n",
    "  function colourBar(ctx, x, y, w, h, table, ticks, lo, hi, logScale) {\n",
    "    for (var i = 0; i < 256; i++) {\n",
    "      ctx.fillStyle = 'rgb(' + table[3 * i] + ',' + table[3 * i + 1] + ',' + table[3 * i + 2] + ')';\n",
    "      var y0 = y + h - (i + 1) * h / 256;\n",
    "      ctx.fillRect(x, Math.floor(y0), w, Math.ceil(h / 256) + 1);\n",
    "    }\n",
    "    ctx.strokeStyle = '#222';\n",
    "    ctx.lineWidth = 1;\n",
    "    ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);\n",
    "    ctx.fillStyle = '#222';\n",
    "    ctx.font = '11px ' + FONT;\n",
    "    ctx.textAlign = 'left';\n",
    "    ctx.textBaseline = 'middle';\n",
    "    ticks.forEach(function (t) {\n",
    "      var f = logScale ? (Math.log10(t[0]) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (t[0] - lo) / (hi - lo);\n",
    "      var ty = Math.round(y + h - f * (h - 1)) + 0.5;\n",
    "      ctx.beginPath();\n",
    "      ctx.moveTo(x + w, ty);\n",
    "      ctx.lineTo(x + w + 4, ty);\n",
    "      ctx.stroke();\n",
    "      ctx.fillText(t[1], x + w + 6, ty);\n",
    "    });\n",
    "  }\n",
    "\n",
    "  /* The attention map: x = query (output) position, y = key (input)\n",
    "   * position, row 0 at the top, one square block of s x s pixels per cell. */\n",
    "  function drawMap() {\n",
    "    var W = weights(state.layer, state.head), n = currentNorm(), table = n.lut;\n",
    "    var s = T >= 512 ? 1 : Math.floor(512 / T), S = T * s;\n",
    "    geo = { s: s, S: S, ml: 64, mt: 8 };\n",
    "    var cw = geo.ml + S + 18 + 16 + 58, ch = geo.mt + S + 48;\n",
    "    var c = $('map'), ctx = setupCanvas(c, cw, ch);\n",
    "    geo.w = cw;\n",
    "    var off = document.createElement('canvas');\n",
    "    off.width = T;\n",
    "    off.height = T;\n",
    "    var octx = off.getContext('2d'), img = octx.createImageData(T, T), px = img.data;\n",
    "    for (var k = 0; k < T; k++) {\n",
    "      for (var q = 0; q < T; q++) {\n",
    "        var t = normT(n, value(W, q, k)), o = 4 * (k * T + q);\n",
    "        if (isNaN(t)) {\n",
    "          px[o] = px[o + 1] = px[o + 2] = 255;\n",
    "        } else {\n",
    "          var i = 3 * lutIndex(t);\n",
    "          px[o] = table[i];\n",
    "          px[o + 1] = table[i + 1];\n",
    "          px[o + 2] = table[i + 2];\n",
    "        }\n",
    "        px[o + 3] = 255;\n",
    "      }\n",
    "    }\n",
    "    octx.putImageData(img, 0, 0);\n",
    "    ctx.imageSmoothingEnabled = false;\n",
    "    ctx.drawImage(off, geo.ml, geo.mt, S, S);\n",
    "    ctx.strokeStyle = '#222';\n",
    "    ctx.lineWidth = 1;\n",
    "    ctx.strokeRect(geo.ml - 0.5, geo.mt - 0.5, S + 1, S + 1);\n",
    "    /* ticks at cell centres */\n",
    "    var st = tickStep(s, 40);\n",
    "    ctx.fillStyle = '#222';\n",
    "    ctx.font = '11px ' + FONT;\n",
    "    for (var v = 0; v < T; v += st) {\n",
    "      var p = Math.round((v + 0.5) * s) + 0.5;\n",
    "      ctx.beginPath();\n",
    "      ctx.moveTo(geo.ml + p - 0.5, geo.mt + S);\n",
    "      ctx.lineTo(geo.ml + p - 0.5, geo.mt + S + 4);\n",
    "      ctx.moveTo(geo.ml, geo.mt + p - 0.5);\n",
    "      ctx.lineTo(geo.ml - 4, geo.mt + p - 0.5);\n",
    "      ctx.stroke();\n",
    "      ctx.textAlign = 'center';\n",
    "      ctx.textBaseline = 'top';\n",
    "      ctx.fillText(String(v), geo.ml + p, geo.mt + S + 6);\n",
    "      ctx.textAlign = 'right';\n",
    "      ctx.textBaseline = 'middle';\n",
    "      ctx.fillText(String(v), geo.ml - 6, geo.mt + p);\n",
    "    }\n",
    "    ctx.font = '12.5px ' + FONT;\n",
    "    ctx.textAlign = 'center';\n",
    "    ctx.textBaseline = 'alphabetic';\n",
    "    ctx.fillText('Output (query) position', geo.ml + S / 2, geo.mt + S + 40);\n",
    "    ctx.save();\n",
    "    ctx.translate(16, geo.mt + S / 2);\n",
    "    ctx.rotate(-Math.PI / 2);\n",
    "    ctx.textBaseline = 'middle';\n",
    "    ctx.fillText('Input (key) position', 0, 0);\n",
    "    ctx.restore();\n",
    "    var ticks;\n",
    "    if (n.log) {\n",
    "      ticks = [];\n",
    "      for (var e = -6; e <= 0; e++) ticks.push([Math.pow(10, e), pow10(e)]);\n",
    "    } else {\n",
    "      ticks = niceTicks(n.lo, n.hi, 5).map(function (x) { return [x, tickLabel(x)]; });\n",
    "    }\n",
    "    colourBar(ctx, geo.ml + S + 18, geo.mt, 16, S, table, ticks, n.lo, n.hi, n.log);\n",
    "    $('maptitle').textContent = 'Layer ' + state.layer + ' Head ' + state.head;\n",
    "    var white = [];\n",
    "    if (n.log) white.push('weights \\u2264 0');\n",
    "    if (CAUSAL) white.push('masked pairs (key after query)');\n",
    "    $('scalenote').textContent = (n.log ? 'Log scale 10\\u207b\\u2076 \\u2026 1, viridis' :\n",
    "        'Linear scale ' + tickLabel(n.lo) + ' \\u2026 ' + tickLabel(n.hi) + ' (this head\\u2019s range), ' + n.name +\n",
    "        (n.lo < 0 ? ' centred on 0' : '')) + (white.length ? '; ' + white.join(' and ') + ' in white. ' : '. ') +\n",
    "        T + ' \\u00d7 ' + T + ' cells, ' + s + ' px each, nothing averaged.';\n",
    "  }\n",
    "\n",
    "  /* cell (q, k) under a mouse event on the map, or null */\n",
    "  function mapCell(ev) {\n",
    "    var r = $('map').getBoundingClientRect(), sc = geo.w / r.width;\n",
    "    var x = (ev.clientX - r.left) * sc - geo.ml, y = (ev.clientY - r.top) * sc - geo.mt;\n",
    "    var q = Math.floor(x / geo.s), k = Math.floor(y / geo.s);\n",
    "    return q < 0 || k < 0 || q >= T || k >= T ? null : { q: q, k: k };\n",
    "  }\n",
    "\n",
    "  /* The similarity matrix of the current layer, RdYlBu_r over -1..1; the\n",
    "   * current head's row and column are outlined. */\n",
    "  function drawSim() {\n",
    "    var G = D.similarity[state.layer].matrix;\n",
    "    var c = Math.max(14, Math.min(34, Math.floor(240 / H))), S = c * H;\n",
    "    simGeo = { c: c, S: S, ml: 34, mt: 6 };\n",
    "    var cw = simGeo.ml + S + 14 + 12 + 44, ch = simGeo.mt + S + 40;\n",
    "    var cv = $('sim'), ctx = setupCanvas(cv, cw, ch);\n",
    "    simGeo.w = cw;\n",
    "    for (var i = 0; i < H; i++) {\n",
    "      for (var j = 0; j < H; j++) {\n",
    "        var v = G[i][j], t = v === null ? NaN : (v + 1) / 2;\n",
    "        if (isNaN(t)) {\n",
    "          ctx.fillStyle = '#ffffff';\n",
    "        } else {\n",
    "          var k = 3 * lutIndex(t);\n",
    "          ctx.fillStyle = 'rgb(' + RDY[k] + ',' + RDY[k + 1] + ',' + RDY[k + 2] + ')';\n",
    "        }\n",
    "        ctx.fillRect(simGeo.ml + j * c, simGeo.mt + i * c, c, c);\n",
    "      }\n",
    "    }\n",
    "    ctx.strokeStyle = '#222';\n",
    "    ctx.lineWidth = 1;\n",
    "    ctx.strokeRect(simGeo.ml - 0.5, simGeo.mt - 0.5, S + 1, S + 1);\n",
    "    var h = state.head;\n",
    "    ctx.lineWidth = 2;\n",
    "    ctx.strokeStyle = '#000';\n",
    "    ctx.strokeRect(simGeo.ml + h * c + 1, simGeo.mt + 1, c - 2, S - 2);\n",
    "    ctx.strokeRect(simGeo.ml + 1, simGeo.mt + h * c + 1, S - 2, c - 2);\n",
    "    ctx.lineWidth = 1;\n",
    "    ctx.fillStyle = '#222';\n",
    "    ctx.font = '11px ' + FONT;\n",
    "    var st = c >= 14 ? 1 : 2;\n",
    "    for (var a = 0; a < H; a += st) {\n",
    "      ctx.textAlign = 'center';\n",
    "      ctx.textBaseline = 'top';\n",
    "      ctx.fillText(String(a), simGeo.ml + (a + 0.5) * c, simGeo.mt + S + 4);\n",
    "      ctx.textAlign = 'right';\n",
    "      ctx.textBaseline = 'middle';\n",
    "      ctx.fillText(String(a), simGeo.ml - 5, simGeo.mt + (a + 0.5) * c);\n",
    "    }\n",
    "    ctx.font = '12px ' + FONT;\n",
    "    ctx.textAlign = 'center';\n",
    "    ctx.textBaseline = 'alphabetic';\n",
    "    ctx.fillText('Head Index', simGeo.ml + S / 2, simGeo.mt + S + 34);\n",
    "    ctx.save();\n",
    "    ctx.translate(10, simGeo.mt + S / 2);\n",
    "    ctx.rotate(-Math.PI / 2);\n",
    "    ctx.textBaseline = 'middle';\n",
    "    ctx.fillText('Head Index', 0, 0);\n",
    "    ctx.restore();\n",
    "    var ticks = [], step = S >= 160 ? 0.25 : 0.5;\n",
    "    for (var tv = -1; tv <= 1 + 1e-9; tv += step) ticks.push([tv, tickLabel(tv)]);\n",
    "    colourBar(ctx, simGeo.ml + S + 14, simGeo.mt, 12, S, RDY, ticks, -1, 1, false);\n",
    "    var m = D.similarity[state.layer];\n",
    "    $('simtitle').textContent = 'Head similarity, layer ' + state.layer;\n",
    "    $('simnote').textContent = 'Effective rank ' + fmt(m.erank_uncentered * H, 2) + ' of ' + H + ' heads (' +\n",
    "        fmt(100 * m.erank_uncentered, 1) + ' %), PCA-based ' + fmt(100 * m.erank_pca, 1) +\n",
    "        ' %; mean off-diagonal similarity ' + fmt(m.mean_offdiag, 3) +\n",
    "        '. s(i, j): cosine similarity of the heads\\u2019 W_q^T W_k; outlined: the current head.';\n",
    "  }\n",
    "\n",
    "  function simCell(ev) {\n",
    "    var r = $('sim').getBoundingClientRect(), sc = simGeo.w / r.width;\n",
    "    var x = (ev.clientX - r.left) * sc - simGeo.ml, y = (ev.clientY - r.top) * sc - simGeo.mt;\n",
    "    var j = Math.floor(x / simGeo.c), i = Math.floor(y / simGeo.c);\n",
    "    return i < 0 || j < 0 || i >= H || j >= H ? null : { i: i, j: j };\n",
    "  }\n",
    "\n",
    "  /* the head a click on cell (i, j) shows: its column's, or in the current\n",
    "   * head's own column its row's */\n",
    "  function simTarget(cell) { return cell.j === state.head ? cell.i : cell.j; }\n",
    "\n",
    "  function row(tr, cells, tag) {\n",
    "    cells.forEach(function (v) {\n",
    "      var td = document.createElement(tag);\n",
    "      td.textContent = v;\n",
    "      tr.appendChild(td);\n",
    "    });\n",
    "    return tr;\n",
    "  }\n",
    "\n",
    "  function drawStats() {\n",
    "    var s = stats(state.layer, state.head), t = $('stats');\n",
    "    t.textContent = '';\n",
    "    [['Sink mass (weight on token 0)', fmt(s.sink_mass, 4)], ['Entropy (nats)', fmt(s.entropy, 3)],\n",
    "     ['Mean distance (tokens)', fmt(s.mean_distance, 2)], ['Top-' + D.topk + ' mass', fmt(s.topk_mass, 4)],\n",
    "     ['Row sum', fmt(s.row_sum, 4)], ['Smallest weight', fmtW(s.min)], ['Largest weight', fmtW(s.max)]]\n",
    "      .forEach(function (r) { t.appendChild(row(document.createElement('tr'), r, 'td')); });\n",
    "    $('statstitle').textContent = 'Head statistics, layer ' + state.layer + ' head ' + state.head;\n",
    "    var hs = $('heads');\n",
    "    hs.textContent = '';\n",
    "    var th = document.createElement('thead');\n",
    "    th.appendChild(row(document.createElement('tr'), ['Head', 'Sink', 'Entropy', 'Distance', 'Top-' + D.topk], 'th'));\n",
    "    hs.appendChild(th);\n",
    "    var tb = document.createElement('tbody');\n",
    "    for (var h = 0; h < H; h++) {\n",
    "      var x = stats(state.layer, h);\n",
    "      var tr = row(document.createElement('tr'), [String(h), fmt(x.sink_mass, 3), fmt(x.entropy, 2),\n",
    "        fmt(x.mean_distance, 1), fmt(x.topk_mass, 3)], 'td');\n",
    "      if (h === state.head) tr.className = 'current';\n",
    "      tr.dataset.head = String(h);\n",
    "      tb.appendChild(tr);\n",
    "    }\n",
    "    hs.appendChild(tb);\n",
    "    $('headstitle').textContent = 'Heads of layer ' + state.layer + ' (click a row to show it)';\n",
    "  }\n",
    "\n",
    "  /* ---- the text, shaded by the hovered query's weights ---- */\n",
    "  var spans = [];\n",
    "  function buildText() {\n",
    "    var box = $('text'), frag = document.createDocumentFragment();\n",
    "    for (var i = 0; i < T; i++) {\n",
    "      var sp = document.createElement('span'), b = D.pieces ? -1 : D.bytes[i];\n",
    "      if (D.pieces) sp.textContent = D.pieces[i].replace(/\\\\([\\\\nt])/g, function (m, c) {\n",
    "        return c === 'n' ? '\\u21b5\\n' : c === 't' ? '\\u21e5' : '\\\\'; });\n",
    "      else if (b === 10) { sp.textContent = '\\u21b5\\n'; sp.className = 'ctl'; }\n",
    "      else if (b === 9) { sp.textContent = '\\u21e5'; sp.className = 'ctl'; }\n",
    "      else if (b >= 32 && b < 127) sp.textContent = String.fromCharCode(b);\n",
    "      else { sp.textContent = '\\\\x' + (b < 16 ? '0' : '') + b.toString(16); sp.className = 'ctl'; }\n",
    "      sp.dataset.i = String(i);\n",
    "      spans.push(sp);\n",
    "      frag.appendChild(sp);\n",
    "    }\n",
    "    box.appendChild(frag);\n",
    "  }\n",
    "\n",
    "  var shaded = false;\n",
    "  function shadeText(q, k) {\n",
    "    var W = weights(state.layer, state.head), n = currentNorm(), m = 0, j;\n",
    "    for (j = 0; j < T; j++) {\n",
    "      var w = value(W, q, j);\n",
    "      if (w !== null && Math.abs(w) > m) m = Math.abs(w);\n",
    "    }\n",
    "    for (j = 0; j < T; j++) {\n",
    "      var v = value(W, q, j), a = 0, sp = spans[j];\n",
    "      if (v !== null && v !== 0 && m > 0)\n",
    "        a = n.log ? Math.max(0, Math.min(1, (Math.log10(Math.abs(v)) + 6) / 6)) : Math.abs(v) / m;\n",
    "      sp.style.backgroundColor = a > 0 ? (v > 0 ? 'rgba(255,127,14,' : 'rgba(31,119,180,') + (0.85 * a).toFixed(3) + ')' : '';\n",
    "      var cls = (sp.className.indexOf('ctl') >= 0 ? 'ctl' : '') + (j === q ? ' q' : '') + (j === k ? ' k' : '');\n",
    "      sp.className = cls.trim();\n",
    "    }\n",
    "    shaded = true;\n",
    "    var box = $('text'), s = spans[q];\n",
    "    if (s.offsetTop < box.scrollTop || s.offsetTop > box.scrollTop + box.clientHeight - 20)\n",
    "      box.scrollTop = s.offsetTop - box.clientHeight / 2;\n",
    "  }\n",
    "\n",
    "  function clearText() {\n",
    "    if (!shaded) return;\n",
    "    spans.forEach(function (sp) {\n",
    "      sp.style.backgroundColor = '';\n",
    "      sp.className = sp.className.indexOf('ctl') >= 0 ? 'ctl' : '';\n",
    "    });\n",
    "    shaded = false;\n",
    "  }\n",
    "\n",
    "  /* ---- tooltip ---- */\n",
    "  function showTip(ev, lines) {\n",
    "    var tip = $('tip');\n",
    "    tip.textContent = '';\n",
    "    lines.forEach(function (l) {\n",
    "      var d = document.createElement('div');\n",
    "      l.forEach(function (part) {\n",
    "        var sp = document.createElement('span');\n",
    "        sp.textContent = part[0];\n",
    "        if (part[1]) sp.id = part[1];\n",
    "        if (part[2]) sp.className = part[2];\n",
    "        d.appendChild(sp);\n",
    "      });\n",
    "      tip.appendChild(d);\n",
    "    });\n",
    "    tip.hidden = false;\n",
    "    var x = ev.clientX + 14, y = ev.clientY + 14, r = tip.getBoundingClientRect();\n",
    "    if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - 10;\n",
    "    if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - 10;\n",
    "    tip.style.left = Math.max(0, x) + 'px';\n",
    "    tip.style.top = Math.max(0, y) + 'px';\n",
    "  }\n",
    "\n",
    "  function hideTip() { $('tip').hidden = true; }\n",
    "\n",
    "  function onMapMove(ev) {\n",
    "    var cell = mapCell(ev);\n",
    "    if (!cell) { hideTip(); clearText(); return; }\n",
    "    var W = weights(state.layer, state.head), w = value(W, cell.q, cell.k);\n",
    "    showTip(ev, [\n",
    "      [['Query ', ''], [String(cell.q), 'tip-q', 'v'], [' ', ''], [tokName(cell.q), 'tip-qc', 'v']],\n",
    "      [['Key ', ''], [String(cell.k), 'tip-k', 'v'], [' ', ''], [tokName(cell.k), 'tip-kc', 'v']],\n",
    "      [['Weight ', ''], [fmtW(w), 'tip-w', 'v']],\n",
    "      [['Layer ' + state.layer + ' Head ' + state.head, 'tip-head']]]);\n",
    "    shadeText(cell.q, cell.k);\n",
    "  }\n",
    "\n",
    "  function onSimMove(ev) {\n",
    "    var cell = simCell(ev);\n",
    "    if (!cell) { hideTip(); return; }\n",
    "    var v = D.similarity[state.layer].matrix[cell.i][cell.j];\n",
    "    showTip(ev, [[['Heads ' + cell.i + ' and ' + cell.j, 'tip-heads']],\n",
    "                 [['s = ', ''], [v === null ? 'n/a' : v.toFixed(4), 'tip-s', 'v']],\n",
    "                 [['Click: show head ' + simTarget(cell), 'tip-click']]]);\n",
    "  }\n",
    "\n",
    "  function onTextMove(ev) {\n",
    "    var t = ev.target;\n",
    "    if (!t.dataset || t.dataset.i === undefined) return;\n",
    "    var q = parseInt(t.dataset.i, 10);\n",
    "    showTip(ev, [[['Query ', ''], [String(q), 'tip-q', 'v'], [' ', ''], [tokName(q), 'tip-qc', 'v']],\n",
    "                 [['Shading: its weights over keys 0..' + (CAUSAL ? q : T - 1), '']]]);\n",
    "    shadeText(q, -1);\n",
    "  }\n",
    "\n",
    "  function saveHash() {\n",
    "    try {\n",
    "      history.replaceState(null, '', '#layer=' + state.layer + '&head=' + state.head + '&scale=' + state.scale);\n",
    "    } catch (e) { /* some file:// settings refuse; the view still works */ }\n",
    "  }\n",
    "\n",
    "  function select(l, h) {\n",
    "    state.layer = Math.max(0, Math.min(L - 1, l));\n",
    "    state.head = Math.max(0, Math.min(H - 1, h));\n",
    "    $('layer').value = String(state.layer);\n",
    "    $('head').value = String(state.head);\n",
    "    hideTip();\n",
    "    clearText();\n",
    "    drawMap();\n",
    "    drawSim();\n",
    "    drawStats();\n",
    "    saveHash();\n",
    "  }\n",
    "\n",
    "  function setScale(s) {\n",
    "    state.scale = s === 'linear' ? 'linear' : 'log';\n",
    "    $('scale-' + state.scale).checked = true;\n",
    "    drawMap();\n",
    "    saveHash();\n",
    "  }\n",
    "\n",
    "  function options(sel, n) {\n",
    "    for (var i = 0; i < n; i++) {\n",
    "      var o = document.createElement('option');\n",
    "      o.value = o.textContent = String(i);\n",
    "      sel.appendChild(o);\n",
    "    }\n",
    "  }\n",
    "\n",
    "  function start() {\n",
    "    D = JSON.parse($('al-data').textContent);\n",
    "    L = D.layers; H = D.heads; T = D.tokens; CAUSAL = D.causal;\n",
    "    LINES = $('al-weights').textContent.split('\\n').map(function (s) { return s.trim(); })\n",
    "      .filter(function (s) { return s.length > 0; });\n",
    "    if (LINES.length !== L * H) throw new Error('attnlab explore: the page holds ' + LINES.length +\n",
    "                                                ' heads of weights, expected ' + L * H + ' (file damaged?)');\n",
    "    VIR = lut(D.colormaps.viridis);\n",
    "    RDY = lut(D.colormaps.RdYlBu_r);\n",
    "    document.title = 'attnlab explore: ' + D.title;\n",
    "    $('title').textContent = D.title;\n",
    "    $('subtitle').textContent = D.score_title + ' \\u00b7 ' + D.attention.toUpperCase() + ', ' + L + ' layers \\u00d7 ' +\n",
    "        H + ' heads \\u00b7 the first ' + T + (D.pieces ? ' tokens of ' : ' bytes of ') + D.text + (T > D.trained_context ?\n",
    "        ' (longer than the ' + D.trained_context + ' tokens the model was trained at)' : '') +\n",
    "        ' \\u00b7 model ' + D.model;\n",
    "    $('footer').textContent = 'Written by ' + D.generator + '. Embedded: the weights of all ' + L * H +\n",
    "        ' heads as exact float32 (the values attnlab attnmap writes to its NPY), little-endian, base64, ' +\n",
    "        (CAUSAL ? 'lower triangle only (row q holds keys 0..q)' : 'full rows') +\n",
    "        '; statistics and head similarity as JSON. Colour maps: matplotlib\\u2019s viridis and RdYlBu_r. ' +\n",
    "        'This product includes color specifications and designs developed by Cynthia Brewer (http://colorbrewer.org/).';\n",
    "    options($('layer'), L);\n",
    "    options($('head'), H);\n",
    "    buildText();\n",
    "    var hp = {};\n",
    "    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {\n",
    "      var p = kv.split('=');\n",
    "      if (p.length === 2) hp[p[0]] = p[1];\n",
    "    });\n",
    "    state.scale = hp.scale === 'linear' ? 'linear' : 'log';\n",
    "    $('scale-' + state.scale).checked = true;\n",
    "    $('layer').addEventListener('change', function () { select(parseInt(this.value, 10), state.head); });\n",
    "    $('head').addEventListener('change', function () { select(state.layer, parseInt(this.value, 10)); });\n",
    "    $('scale-log').addEventListener('change', function () { setScale('log'); });\n",
    "    $('scale-linear').addEventListener('change', function () { setScale('linear'); });\n",
    "    $('map').addEventListener('mousemove', onMapMove);\n",
    "    $('map').addEventListener('mouseleave', function () { hideTip(); clearText(); });\n",
    "    $('sim').addEventListener('mousemove', onSimMove);\n",
    "    $('sim').addEventListener('mouseleave', hideTip);\n",
    "    $('sim').addEventListener('click', function (ev) {\n",
    "      var cell = simCell(ev);\n",
    "      if (cell) select(state.layer, simTarget(cell));\n",
    "      onSimMove(ev);\n",
    "    });\n",
    "    $('heads').addEventListener('click', function (ev) {\n",
    "      var tr = ev.target.closest('tr');\n",
    "      if (tr && tr.dataset.head !== undefined) select(state.layer, parseInt(tr.dataset.head, 10));\n",
    "    });\n",
    "    $('text').addEventListener('mouseover', onTextMove);\n",
    "    $('text').addEventListener('mouseleave', function () { hideTip(); clearText(); });\n",
    "    select(parseInt(hp.layer || '0', 10) || 0, parseInt(hp.head || '0', 10) || 0);\n",
    "    /* for scripts and tests: where a cell is on screen, in client coordinates */\n",
    "    window.attnlabExplore = {\n",
    "      select: select,\n",
    "      setScale: setScale,\n",
    "      state: function () { return { layer: state.layer, head: state.head, scale: state.scale }; },\n",
    "      cellCenter: function (q, k) {\n",
    "        var r = $('map').getBoundingClientRect(), sc = r.width / geo.w;\n",
    "        return { x: r.left + (geo.ml + (q + 0.5) * geo.s) * sc, y: r.top + (geo.mt + (k + 0.5) * geo.s) * sc };\n",
    "      },\n",
    "      simCellCenter: function (i, j) {\n",
    "        var r = $('sim').getBoundingClientRect(), sc = r.width / simGeo.w;\n",
    "        return { x: r.left + (simGeo.ml + (j + 0.5) * simGeo.c) * sc, y: r.top + (simGeo.mt + (i + 0.5) * simGeo.c) * sc };\n",
    "      },\n",
    "      mapRect: function () {\n",
    "        var r = $('map').getBoundingClientRect(), sc = r.width / geo.w;\n",
    "        return { x: r.left + geo.ml * sc, y: r.top + geo.mt * sc, size: geo.S * sc };\n",
    "      }\n",
    "    };\n",
    "    document.body.dataset.ready = '1';\n",
    "  }\n",
    "\n",
    "  try {\n",
    "    start();\n",
    "  } catch (e) {\n",
    "    $('error').textContent = String(e && e.message ? e.message : e);\n",
    "    throw e;\n",
    "  }\n",
    "})();\n",
    NULL,
};
/* ---- END page text ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 (RFC 4648, with padding) of n bytes into out, which holds
 * 4 * ceil(n / 3) characters; returns that count. */
static size_t b64_encode(const unsigned char *in, size_t n, char *out) {
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
    return o;
}

/* Values stored per head: the lower triangle with the diagonal for causal
 * models (the rest is masked and exactly 0), else everything. */
static size_t values_per_head(int T, int causal) {
    return causal ? (size_t)T * (size_t)(T + 1) / 2 : (size_t)T * (size_t)T;
}

size_t al_explore_bytes_per_head(int T, int causal) {
    return (values_per_head(T, causal) * 4 + 2) / 3 * 4 + 1;
}

/* Writes a NULL-terminated array of page lines. */
static int write_lines(al_afile *f, const char *const *lines, al_err *err) {
    for (size_t i = 0; lines[i]; i++)
        if (al_afile_write(f, lines[i], strlen(lines[i]), err)) return -1;
    return 0;
}

static int write_str(al_afile *f, const char *s, al_err *err) { return al_afile_write(f, s, strlen(s), err); }

/* Writes JSON text with '<', '>' and '&' as \u escapes. They can only occur
 * inside JSON strings, where the escapes mean the same characters, and the
 * result can no longer end the surrounding <script> element. */
static int write_json_escaped(al_afile *f, const char *json, al_err *err) {
    const char *run = json;
    for (const char *p = json; *p; p++) {
        const char *esc = *p == '<' ? "\\u003c" : *p == '>' ? "\\u003e" : *p == '&' ? "\\u0026" : NULL;
        if (!esc) continue;
        if (al_afile_write(f, run, (size_t)(p - run), err) || write_str(f, esc, err)) return -1;
        run = p + 1;
    }
    return write_str(f, run, err);
}

void al_explore_abort(al_explore_writer *w) {
    if (w->open) al_afile_abort(&w->f);
    w->open = 0;
    free(w->raw);
    free(w->b64);
    w->raw = NULL;
    w->b64 = NULL;
}

int al_explore_open(al_explore_writer *w, const char *path, int T, int causal, al_err *err) {
    memset(w, 0, sizeof *w);
    if (T < 1) return al_errf(err, "explore: no tokens");
    w->T = T;
    w->causal = causal ? 1 : 0;
    w->values_per_head = values_per_head(T, w->causal);
    w->b64_len = al_explore_bytes_per_head(T, w->causal);
    w->raw = malloc(w->values_per_head * 4);
    w->b64 = malloc(w->b64_len);
    if (!w->raw || !w->b64) {
        al_explore_abort(w);
        return al_errf(err, "out of memory for a page of %d tokens", T);
    }
    if (al_afile_open(&w->f, path, err)) {
        al_explore_abort(w);
        return -1;
    }
    w->open = 1;
    if (write_lines(&w->f, PAGE_HEAD, err)) {
        al_explore_abort(w);
        return -1;
    }
    return 0;
}

int al_explore_add_head(al_explore_writer *w, const float *P, al_err *err) {
    if (!w->open) return al_errf(err, "explore: the page is not open");
    const int T = w->T;
    unsigned char *o = w->raw;
    /* little-endian float32 whatever the host's byte order */
    for (int q = 0; q < T; q++) {
        const float *row = P + (size_t)q * T;
        int n = w->causal ? q + 1 : T;
        for (int k = 0; k < n; k++) {
            uint32_t u;
            memcpy(&u, &row[k], 4);
            o[0] = (unsigned char)u;
            o[1] = (unsigned char)(u >> 8);
            o[2] = (unsigned char)(u >> 16);
            o[3] = (unsigned char)(u >> 24);
            o += 4;
        }
    }
    size_t n = b64_encode(w->raw, w->values_per_head * 4, w->b64);
    w->b64[n++] = '\n';
    if (al_afile_write(&w->f, w->b64, n, err)) {
        al_explore_abort(w);
        return -1;
    }
    w->heads_written++;
    return 0;
}

/* A colour map's 256 byte triples as 1536 hex digits (lut8, the bytes the
 * figures use). NULL when the map is unknown or memory runs out. */
static char *lut_hex(const char *name) {
    const al_cmap *c = al_cmap_get(name);
    char *s = c ? malloc(AL_CMAP_N * 6 + 1) : NULL;
    if (!s) return NULL;
    for (int i = 0; i < AL_CMAP_N; i++)
        snprintf(s + 6 * i, 7, "%02x%02x%02x", c->lut8[i][0], c->lut8[i][1], c->lut8[i][2]);
    return s;
}

/* The data object the script reads (field names are its contract with the
 * script above; docs/explore.md lists them). NULL when out of memory. */
static char *info_json(const al_explore_info *in) {
    cJSON *root = cJSON_CreateObject();
    char *vir = lut_hex("viridis"), *rdy = lut_hex("RdYlBu_r"), *text = NULL;
    if (!root || !vir || !rdy) goto done;
    cJSON_AddNumberToObject(root, "format", 1);
    cJSON_AddStringToObject(root, "generator", "attnlab " AL_VERSION);
    cJSON_AddStringToObject(root, "title", in->title);
    cJSON_AddStringToObject(root, "model", in->model);
    cJSON_AddStringToObject(root, "text", in->text);
    cJSON_AddStringToObject(root, "attention", in->attention);
    cJSON_AddStringToObject(root, "score", in->score);
    cJSON_AddStringToObject(root, "score_title", in->score_title);
    cJSON_AddNumberToObject(root, "layers", in->layers);
    cJSON_AddNumberToObject(root, "heads", in->heads);
    cJSON_AddNumberToObject(root, "tokens", in->tokens);
    cJSON_AddNumberToObject(root, "trained_context", in->trained_context);
    cJSON_AddBoolToObject(root, "causal", in->causal);
    cJSON_AddNumberToObject(root, "topk", in->layers * in->heads > 0 ? in->stats[0].topk : 0);
    cJSON_AddStringToObject(root, "weights", in->causal ? "float32le base64, one line per head (layer-major), "
                                                          "row q holds keys 0..q"
                                                        : "float32le base64, one line per head (layer-major), "
                                                          "row q holds keys 0..T-1");
    if (in->token_labels) { /* a tokenizer.json's tokens: their ids and printable pieces */
        cJSON_AddItemToObject(root, "token_ids", cJSON_CreateIntArray(in->token_bytes, in->tokens));
        cJSON_AddItemToObject(root, "pieces", cJSON_CreateStringArray(in->token_labels, in->tokens));
    } else {
        cJSON_AddItemToObject(root, "bytes", cJSON_CreateIntArray(in->token_bytes, in->tokens));
    }
    cJSON *stats = cJSON_AddArrayToObject(root, "stats");
    for (int l = 0; l < in->layers; l++) {
        cJSON *layer = cJSON_CreateArray();
        for (int h = 0; h < in->heads; h++) {
            const al_head_stats *s = &in->stats[l * in->heads + h];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "sink_mass", s->sink_mass);
            cJSON_AddNumberToObject(o, "entropy", s->entropy);
            cJSON_AddNumberToObject(o, "mean_distance", s->mean_distance);
            cJSON_AddNumberToObject(o, "topk_mass", s->topk_mass);
            cJSON_AddNumberToObject(o, "row_sum", s->row_sum);
            cJSON_AddNumberToObject(o, "min", s->min_weight);
            cJSON_AddNumberToObject(o, "max", s->max_weight);
            cJSON_AddItemToArray(layer, o);
        }
        cJSON_AddItemToArray(stats, layer);
    }
    cJSON *sim = cJSON_AddArrayToObject(root, "similarity");
    const int H = in->sim->H;
    for (int l = 0; l < in->sim->L; l++) {
        cJSON *o = cJSON_CreateObject(), *rows = cJSON_CreateArray();
        const double *G = in->sim->sim + (size_t)l * H * H;
        for (int i = 0; i < H; i++) cJSON_AddItemToArray(rows, cJSON_CreateDoubleArray(G + (size_t)i * H, H));
        cJSON_AddItemToObject(o, "matrix", rows);
        cJSON_AddNumberToObject(o, "erank_uncentered", in->sim->layer[l].erank_uncentered);
        cJSON_AddNumberToObject(o, "erank_pca", in->sim->layer[l].erank_pca);
        cJSON_AddNumberToObject(o, "mean_offdiag", in->sim->layer[l].mean_offdiag);
        cJSON_AddItemToArray(sim, o);
    }
    cJSON *maps = cJSON_AddObjectToObject(root, "colormaps");
    cJSON_AddStringToObject(maps, "viridis", vir);
    cJSON_AddStringToObject(maps, "RdYlBu_r", rdy);
    text = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(root);
    free(vir);
    free(rdy);
    return text;
}

int al_explore_finish(al_explore_writer *w, const al_explore_info *info, al_err *err) {
    if (!w->open) return al_errf(err, "explore: the page is not open");
    int rc = -1;
    char *json = NULL;
    if (info->layers * info->heads != w->heads_written || info->tokens != w->T || !info->sim ||
        info->sim->L != info->layers || info->sim->H != info->heads) {
        al_errf(err, "explore: %d heads of %d tokens written for %d layers x %d heads of %d tokens", w->heads_written,
                w->T, info->layers, info->heads, info->tokens);
        goto done;
    }
    json = info_json(info);
    if (!json) {
        al_errf(err, "out of memory");
        goto done;
    }
    if (write_str(&w->f, "</script>\n<script type=\"application/json\" id=\"al-data\">\n", err) ||
        write_json_escaped(&w->f, json, err) || write_str(&w->f, "\n</script>\n<script>\n", err) ||
        write_lines(&w->f, PAGE_SCRIPT, err) || write_str(&w->f, "</script>\n</body>\n</html>\n", err))
        goto done;
    if (al_afile_commit(&w->f, err)) goto done;
    w->open = 0;
    rc = 0;
done:
    free(json);
    al_explore_abort(w);
    return rc;
}
