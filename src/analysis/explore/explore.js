'use strict';
/* attnlab explore: draws one head's weights, its statistics, its layer's
 * head similarity, thumbnails of the layer's heads and the layers' 95 %
 * mass budgets. The single file embeds its data (exact float32 heads and
 * 1-byte display maps, docs/explore.md); the page of `explore --serve`
 * fetches the same forms from its server (same origin, a token in the URL). */
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var D, LINES, L, H, T, CAUSAL, VIR, RDY, SERVE = null, TOKEN = '';
  var state = { layer: 0, head: 0, scale: 'log', q: -1, k: -1 };
  var cache = new Map();          /* decoded heads, the 16 most recent */
  var layers = {};                /* serve: per layer {stats, thumbs} once fetched */
  var rows = new Map();           /* serve: exact rows, key "l,h,q" */
  var cur = null;                 /* the head on show: {exact, f, D, vals, min, max} */
  var pending = 0, idleWaiters = [];
  var geo = null, simGeo = null, thumbGeo = null;
  var SUP = { '-': '\u207b', '0': '\u2070', '1': '\u00b9', '2': '\u00b2', '3': '\u00b3', '4': '\u2074',
              '5': '\u2075', '6': '\u2076', '7': '\u2077', '8': '\u2078', '9': '\u2079' };
  var FONT = '"DejaVu Sans", "Helvetica Neue", Arial, sans-serif';
  var THUMB = 64;

  /* 768 hex bytes -> Uint8Array of 256 rgb triples */
  function lut(hex) {
    var a = new Uint8Array(768);
    for (var i = 0; i < 768; i++) a[i] = parseInt(hex.substr(2 * i, 2), 16);
    return a;
  }

  /* matplotlib's lookup: index floor(t * 256), 1.0 -> 255, under -> 0, over -> 255 */
  function lutIndex(t) {
    if (!(t < 1)) return 255;
    if (t < 0) return 0;
    var i = Math.floor(t * 256);
    return i > 255 ? 255 : i;
  }

  function b64bytes(s) {
    var bin = atob(s), n = bin.length, bytes = new Uint8Array(n);
    for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }

  /* base64 of little-endian float32 -> Float32Array */
  function b64floats(s) {
    var bytes = b64bytes(s), dv = new DataView(bytes.buffer), out = new Float32Array(bytes.length >> 2);
    for (var j = 0; j < out.length; j++) out[j] = dv.getFloat32(4 * j, true);
    return out;
  }

  /* The weight a 1-byte code stands for (src/analysis/explore_maps.c):
   * 7 decades below the head's largest |w| in 254 steps ("u"), or 126 per
   * sign around code 128 ("s"). */
  function codeTable(M, signed) {
    var t = new Float32Array(256);
    for (var c = 0; c < 256; c++) {
      if (!signed) t[c] = c ? M * Math.pow(10, (c - 1) * 7 / 254 - 7) : 0;
      else if (c === 128) t[c] = 0;
      else {
        var l = c > 128 ? c - 129 : 127 - c, v = M * Math.pow(10, l * 7 / 126 - 7);
        t[c] = c > 128 ? v : -v;
      }
    }
    return t;
  }

  /* One line of weights -> a head: exact float32 (f = 1, D = T), or a
   * display map "~M,u|s,f:codes" of D = ceil(T / f) cells a side. */
  function parseLine(line) {
    var h;
    if (line.charAt(0) === '~') {
      var colon = line.indexOf(':'), p = line.substring(1, colon).split(',');
      var M = parseFloat(p[0]), signed = p[1] === 's', f = parseInt(p[2], 10), tab = codeTable(M, signed);
      var codes = b64bytes(line.substring(colon + 1)), vals = new Float32Array(codes.length);
      for (var i = 0; i < codes.length; i++) vals[i] = tab[codes[i]];
      h = { exact: false, f: f, D: Math.ceil(T / f), vals: vals, signed: signed };
    } else {
      h = { exact: true, f: 1, D: T, vals: b64floats(line) };
    }
    var lo = Infinity, hi = -Infinity;
    for (var j = 0; j < h.vals.length; j++) {
      var v = h.vals[j];
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    h.min = lo;
    h.max = hi;
    return h;
  }

  /* serve: GET one route of the server (explore_serve.js); resolves with its text */
  function get(route) {
    pending++;
    return window.attnlabServer.get(route, TOKEN).finally(function () {
      if (--pending === 0) idleWaiters.splice(0).forEach(function (f) { f(); });
    });
  }

  function fail(e) {
    $('error').textContent = String(e && e.message ? e.message : e);
    console.error(e);
  }

  /* The head (l, h): from the page's line, or from the server; a Promise.
   * The 16 most recently used heads stay decoded. */
  function loadHead(l, h) {
    var key = l * H + h;
    if (cache.has(key)) {
      var w = cache.get(key);
      cache.delete(key);
      cache.set(key, w);
      return Promise.resolve(w);
    }
    var p = SERVE ? get('api/map?layer=' + l + '&head=' + h) : Promise.resolve(LINES[key]);
    return p.then(function (line) {
      var w = parseLine(line);
      cache.set(key, w);
      if (cache.size > 16) cache.delete(cache.keys().next().value);
      return w;
    });
  }

  /* serve: the statistics and thumbnails of a layer; a Promise. */
  function loadLayer(l) {
    if (!SERVE) return Promise.resolve(null);
    if (layers[l]) return Promise.resolve(layers[l]);
    return get('api/layer?layer=' + l).then(function (text) {
      var o = JSON.parse(text);
      layers[l] = { stats: o.stats, thumbs: o.thumbs };
      return layers[l];
    });
  }

  /* weight of display cell (a, b) of head W, or null where the mask hides it */
  function value(W, a, b) {
    if (CAUSAL) return b > a ? null : W.vals[a * (a + 1) / 2 + b];
    return W.vals[a * W.D + b];
  }

  /* statistics of (l, h): embedded, or fetched (null until then) */
  function stats(l, h) {
    if (D.stats) return D.stats[l][h];
    return layers[l] ? layers[l].stats[h] : null;
  }

  /* The colour scale of the current head: log 1e-6..1 on viridis, or linear
   * 0..max on viridis (symmetric on RdYlBu_r when the head has negative weights). */
  function currentNorm() {
    var s = stats(state.layer, state.head) || { min: cur.min, max: cur.max };
    if (state.scale === 'log') return { log: true, lo: 1e-6, hi: 1, lut: VIR, name: 'viridis' };
    var lo = s.min, hi = s.max;
    if (lo !== null && lo < 0) {
      var m = Math.max(-lo, hi > 0 ? hi : 0) || 1;
      return { log: false, lo: -m, hi: m, lut: RDY, name: 'RdYlBu_r' };
    }
    return { log: false, lo: 0, hi: hi > 0 ? hi : 1, lut: VIR, name: 'viridis' };
  }

  /* position along the colour map, or NaN for "bad" (background) */
  function normT(n, v) {
    if (v === null || isNaN(v)) return NaN;
    if (n.log) return v > 0 ? (Math.log10(v) - Math.log10(n.lo)) / (Math.log10(n.hi) - Math.log10(n.lo)) : NaN;
    return (v - n.lo) / (n.hi - n.lo);
  }

  function fmtW(w) {
    if (w === null) return 'masked';
    if (w === undefined) return '\u2026';
    if (w === 0) return '0';
    var a = Math.abs(w);
    return a >= 1e-3 && a < 1e4 ? w.toPrecision(6) : w.toExponential(5);
  }

  function fmt(v, d) { return v === null || v === undefined ? 'n/a' : v.toFixed(d); }

  function pow10(e) {
    var s = String(e), r = '10';
    for (var i = 0; i < s.length; i++) r += SUP[s[i]];
    return r;
  }

  /* byte -> how the tooltip names it */
  function chName(b) {
    if (b === 32) return "' '";
    if (b === 10) return "'\\n'";
    if (b === 9) return "'\\t'";
    if (b === 13) return "'\\r'";
    if (b > 32 && b < 127) return "'" + String.fromCharCode(b) + "'";
    return "'\\x" + (b < 16 ? '0' : '') + b.toString(16) + "'";
  }
  /* position i's token for the tooltips: its byte, or a tokenizer's piece (already escaped) */
  function tokName(i) { return D.pieces ? "'" + D.pieces[i] + "'" : chName(D.bytes[i]); }

  /* ticks every 1, 2 or 5 x 10^k cells, at least minPx apart */
  function tickStep(pxPerCell, minPx) {
    for (var p = 1; ; p *= 10) {
      var c = [1, 2, 5];
      for (var i = 0; i < 3; i++) if (c[i] * p * pxPerCell >= minPx) return c[i] * p;
    }
  }

  /* nice values in [lo, hi] for a linear colour bar */
  function niceTicks(lo, hi, n) {
    var raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw))), st = p;
    [1, 2, 2.5, 5, 10].some(function (m) { st = m * p; return m * p >= raw; });
    var out = [];
    for (var v = Math.ceil(lo / st - 1e-9) * st; v <= hi + st * 1e-9; v += st) out.push(Math.abs(v) < st * 1e-9 ? 0 : v);
    return out;
  }

  function tickLabel(v) { return String(parseFloat(v.toPrecision(4))); }

  /* Canvas sized in CSS pixels, drawn sharp on high-density screens. */
  function setupCanvas(c, w, h) {
    var r = window.devicePixelRatio || 1;
    c.width = Math.round(w * r);
    c.height = Math.round(h * r);
    c.style.width = w + 'px';
    c.style.height = h + 'px';
    var ctx = c.getContext('2d');
    ctx.setTransform(r, 0, 0, r, 0, 0);
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, w, h);
    return ctx;
  }

  /* Vertical colour bar at (x, y), w x h, with labelled ticks (value, label). */
  function colourBar(ctx, x, y, w, h, table, ticks, lo, hi, logScale) {
    for (var i = 0; i < 256; i++) {
      ctx.fillStyle = 'rgb(' + table[3 * i] + ',' + table[3 * i + 1] + ',' + table[3 * i + 2] + ')';
      var y0 = y + h - (i + 1) * h / 256;
      ctx.fillRect(x, Math.floor(y0), w, Math.ceil(h / 256) + 1);
    }
    ctx.strokeStyle = '#222';
    ctx.lineWidth = 1;
    ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
    ctx.fillStyle = '#222';
    ctx.font = '11px ' + FONT;
    ctx.textAlign = 'left';
    ctx.textBaseline = 'middle';
    ticks.forEach(function (t) {
      var f = logScale ? (Math.log10(t[0]) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (t[0] - lo) / (hi - lo);
      var ty = Math.round(y + h - f * (h - 1)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x + w, ty);
      ctx.lineTo(x + w + 4, ty);
      ctx.stroke();
      ctx.fillText(t[1], x + w + 6, ty);
    });
  }

  /* The attention map: x = query (output) position, y = key (input)
   * position, row 0 at the top, one square block of s x s pixels per cell. */
  function drawMap() {
    var W = cur, n = currentNorm(), table = n.lut, N = W.D, f = W.f;
    var s = N >= 512 ? 1 : Math.floor(512 / N), S = N * s;
    geo = { s: s, S: S, ml: 64, mt: 8, f: f, N: N };
    var cw = geo.ml + S + 18 + 16 + 58, ch = geo.mt + S + 48;
    var c = $('map'), ctx = setupCanvas(c, cw, ch);
    geo.w = cw;
    var off = document.createElement('canvas');
    off.width = N;
    off.height = N;
    var octx = off.getContext('2d'), img = octx.createImageData(N, N), px = img.data;
    for (var k = 0; k < N; k++) {
      for (var q = 0; q < N; q++) {
        var t = normT(n, value(W, q, k)), o = 4 * (k * N + q);
        if (isNaN(t)) {
          px[o] = px[o + 1] = px[o + 2] = 255;
        } else {
          var i = 3 * lutIndex(t);
          px[o] = table[i];
          px[o + 1] = table[i + 1];
          px[o + 2] = table[i + 2];
        }
        px[o + 3] = 255;
      }
    }
    octx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, geo.ml, geo.mt, S, S);
    ctx.strokeStyle = '#222';
    ctx.lineWidth = 1;
    ctx.strokeRect(geo.ml - 0.5, geo.mt - 0.5, S + 1, S + 1);
    /* ticks at cell centres */
    var st = tickStep(s / f, 40);
    ctx.fillStyle = '#222';
    ctx.font = '11px ' + FONT;
    for (var v = 0; v < T; v += st) {
      var p = Math.round((v / f + 0.5) * s) + 0.5;
      ctx.beginPath();
      ctx.moveTo(geo.ml + p - 0.5, geo.mt + S);
      ctx.lineTo(geo.ml + p - 0.5, geo.mt + S + 4);
      ctx.moveTo(geo.ml, geo.mt + p - 0.5);
      ctx.lineTo(geo.ml - 4, geo.mt + p - 0.5);
      ctx.stroke();
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      ctx.fillText(String(v), geo.ml + p, geo.mt + S + 6);
      ctx.textAlign = 'right';
      ctx.textBaseline = 'middle';
      ctx.fillText(String(v), geo.ml - 6, geo.mt + p);
    }
    ctx.font = '12.5px ' + FONT;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'alphabetic';
    ctx.fillText('Output (query) position', geo.ml + S / 2, geo.mt + S + 40);
    ctx.save();
    ctx.translate(16, geo.mt + S / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle';
    ctx.fillText('Input (key) position', 0, 0);
    ctx.restore();
    var ticks;
    if (n.log) {
      ticks = [];
      for (var e = -6; e <= 0; e++) ticks.push([Math.pow(10, e), pow10(e)]);
    } else {
      ticks = niceTicks(n.lo, n.hi, 5).map(function (x) { return [x, tickLabel(x)]; });
    }
    colourBar(ctx, geo.ml + S + 18, geo.mt, 16, S, table, ticks, n.lo, n.hi, n.log);
    $('maptitle').textContent = 'Layer ' + state.layer + ' Head ' + state.head;
    var white = [];
    if (n.log) white.push('weights \u2264 0');
    if (CAUSAL) white.push('masked pairs (key after query)');
    $('scalenote').textContent = (n.log ? 'Log scale 10\u207b\u2076 \u2026 1, viridis' :
        'Linear scale ' + tickLabel(n.lo) + ' \u2026 ' + tickLabel(n.hi) + ' (this head\u2019s range), ' + n.name +
        (n.lo < 0 ? ' centred on 0' : '')) + (white.length ? '; ' + white.join(' and ') + ' in white. ' : '. ') +
        (f === 1 ? T + ' \u00d7 ' + T + ' cells, ' + s + ' px each, nothing averaged' :
         N + ' \u00d7 ' + N + ' display cells of ' + f + ' \u00d7 ' + f + ' token pairs each (the pair of largest ' +
         'magnitude shown), ' + s + ' px each') +
        (W.exact ? '; exact float32 weights.' : SERVE ? '; colours from the 1-byte map, the tooltip fetches the exact weight.' :
         '; this head is stored as a 1-byte log-scale map: values within 3.3 % (6.7 % for signed weights) of the weight; ' +
         'write the page with --layer/--head naming it for exact weights.');
  }

  /* cell (q, k) under a mouse event on the map, or null */
  function mapCell(ev) {
    var r = $('map').getBoundingClientRect(), sc = geo.w / r.width;
    var x = (ev.clientX - r.left) * sc - geo.ml, y = (ev.clientY - r.top) * sc - geo.mt;
    var q = Math.floor(x / geo.s), k = Math.floor(y / geo.s);
    return q < 0 || k < 0 || q >= geo.N || k >= geo.N ? null : { q: q, k: k };
  }

  /* The similarity matrix of the current layer, RdYlBu_r over -1..1; the
   * current head's row and column are outlined. */
  function drawSim() {
    var G = D.similarity[state.layer].matrix;
    var c = Math.max(14, Math.min(34, Math.floor(240 / H))), S = c * H;
    simGeo = { c: c, S: S, ml: 34, mt: 6 };
    var cw = simGeo.ml + S + 14 + 12 + 44, ch = simGeo.mt + S + 40;
    var cv = $('sim'), ctx = setupCanvas(cv, cw, ch);
    simGeo.w = cw;
    for (var i = 0; i < H; i++) {
      for (var j = 0; j < H; j++) {
        var v = G[i][j], t = v === null ? NaN : (v + 1) / 2;
        if (isNaN(t)) {
          ctx.fillStyle = '#ffffff';
        } else {
          var k = 3 * lutIndex(t);
          ctx.fillStyle = 'rgb(' + RDY[k] + ',' + RDY[k + 1] + ',' + RDY[k + 2] + ')';
        }
        ctx.fillRect(simGeo.ml + j * c, simGeo.mt + i * c, c, c);
      }
    }
    ctx.strokeStyle = '#222';
    ctx.lineWidth = 1;
    ctx.strokeRect(simGeo.ml - 0.5, simGeo.mt - 0.5, S + 1, S + 1);
    var h = state.head;
    ctx.lineWidth = 2;
    ctx.strokeStyle = '#000';
    ctx.strokeRect(simGeo.ml + h * c + 1, simGeo.mt + 1, c - 2, S - 2);
    ctx.strokeRect(simGeo.ml + 1, simGeo.mt + h * c + 1, S - 2, c - 2);
    ctx.lineWidth = 1;
    ctx.fillStyle = '#222';
    ctx.font = '11px ' + FONT;
    var st = c >= 14 ? 1 : 2;
    for (var a = 0; a < H; a += st) {
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      ctx.fillText(String(a), simGeo.ml + (a + 0.5) * c, simGeo.mt + S + 4);
      ctx.textAlign = 'right';
      ctx.textBaseline = 'middle';
      ctx.fillText(String(a), simGeo.ml - 5, simGeo.mt + (a + 0.5) * c);
    }
    ctx.font = '12px ' + FONT;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'alphabetic';
    ctx.fillText('Head Index', simGeo.ml + S / 2, simGeo.mt + S + 34);
    ctx.save();
    ctx.translate(10, simGeo.mt + S / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle';
    ctx.fillText('Head Index', 0, 0);
    ctx.restore();
    var ticks = [], step = S >= 160 ? 0.25 : 0.5;
    for (var tv = -1; tv <= 1 + 1e-9; tv += step) ticks.push([tv, tickLabel(tv)]);
    colourBar(ctx, simGeo.ml + S + 14, simGeo.mt, 12, S, RDY, ticks, -1, 1, false);
    var m = D.similarity[state.layer];
    $('simtitle').textContent = 'Head similarity, layer ' + state.layer;
    $('simnote').textContent = 'Effective rank ' + fmt(m.erank_uncentered * H, 2) + ' of ' + H + ' heads (' +
        fmt(100 * m.erank_uncentered, 1) + ' %), PCA-based ' + fmt(100 * m.erank_pca, 1) +
        ' %; mean off-diagonal similarity ' + fmt(m.mean_offdiag, 3) +
        '. s(i, j): cosine similarity of the heads\u2019 W_q^T W_k; outlined: the current head.';
  }

  function simCell(ev) {
    var r = $('sim').getBoundingClientRect(), sc = simGeo.w / r.width;
    var x = (ev.clientX - r.left) * sc - simGeo.ml, y = (ev.clientY - r.top) * sc - simGeo.mt;
    var j = Math.floor(x / simGeo.c), i = Math.floor(y / simGeo.c);
    return i < 0 || j < 0 || i >= H || j >= H ? null : { i: i, j: j };
  }

  /* the head a click on cell (i, j) shows: its column's, or in the current
   * head's own column its row's */
  function simTarget(cell) { return cell.j === state.head ? cell.i : cell.j; }

  function row(tr, cells, tag) {
    cells.forEach(function (v) {
      var td = document.createElement(tag);
      td.textContent = v;
      tr.appendChild(td);
    });
    return tr;
  }

  function drawStats() {
    var s = stats(state.layer, state.head), t = $('stats');
    t.textContent = '';
    $('statstitle').textContent = 'Head statistics, layer ' + state.layer + ' head ' + state.head;
    $('headstitle').textContent = 'Heads of layer ' + state.layer + ' (click a row to show it)';
    var hs = $('heads');
    hs.textContent = '';
    if (!s) {
      t.appendChild(row(document.createElement('tr'), ['computing the layer\u2019s statistics\u2026'], 'td'));
      return;
    }
    [['Sink mass (weight on token 0)', fmt(s.sink_mass, 4)], ['Entropy (nats)', fmt(s.entropy, 3)],
     ['Mean distance (tokens)', fmt(s.mean_distance, 2)], ['Top-' + D.topk + ' mass', fmt(s.topk_mass, 4)],
     ['Keys holding 95 % of the mass', fmt(s.budget95, 1) + ' (' + fmt(100 * s.budget95_frac, 1) + ' %)'],
     ['Row sum', fmt(s.row_sum, 4)], ['Smallest weight', fmtW(s.min)], ['Largest weight', fmtW(s.max)]]
      .forEach(function (r) { t.appendChild(row(document.createElement('tr'), r, 'td')); });
    var th = document.createElement('thead');
    th.appendChild(row(document.createElement('tr'), ['Head', 'Sink', 'Entropy', 'Distance', 'Top-' + D.topk, '95 % keys'], 'th'));
    hs.appendChild(th);
    var tb = document.createElement('tbody');
    for (var h = 0; h < H; h++) {
      var x = stats(state.layer, h);
      var tr = row(document.createElement('tr'), [String(h), fmt(x.sink_mass, 3), fmt(x.entropy, 2),
        fmt(x.mean_distance, 1), fmt(x.topk_mass, 3), fmt(100 * x.budget95_frac, 1) + ' %'], 'td');
      if (h === state.head) tr.className = 'current';
      tr.dataset.head = String(h);
      tb.appendChild(tr);
    }
    hs.appendChild(tb);
  }

  /* Pools a head to a THUMB x THUMB grid (largest magnitude per cell) and
   * draws it at (x, y) on the log scale. */
  function drawThumb(ctx, W, x, y) {
    var N = W.D, g = Math.min(THUMB, N), best = new Float32Array(g * g), has = new Uint8Array(g * g);
    for (var a = 0; a < N; a++) {
      var ta = Math.floor(a * g / N), nb = CAUSAL ? a + 1 : N;
      for (var b = 0; b < nb; b++) {
        var v = value(W, a, b), i = Math.floor(b * g / N) * g + ta; /* x = query, y = key */
        if (!has[i] || Math.abs(v) > Math.abs(best[i])) best[i] = v;
        has[i] = 1;
      }
    }
    var img = ctx.createImageData(g, g), px = img.data, n = { log: true, lo: 1e-6, hi: 1 };
    for (var j = 0; j < g * g; j++) {
      var t = has[j] ? normT(n, Math.abs(best[j])) : NaN, o = 4 * j;
      if (isNaN(t)) { px[o] = px[o + 1] = px[o + 2] = 255; }
      else { var c = 3 * lutIndex(t); px[o] = VIR[c]; px[o + 1] = VIR[c + 1]; px[o + 2] = VIR[c + 2]; }
      px[o + 3] = 255;
    }
    var off = document.createElement('canvas');
    off.width = off.height = g;
    off.getContext('2d').putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, x, y, THUMB, THUMB);
  }

  /* The thumbnails of layer l drawn once into an offscreen canvas (null
   * while a served layer has not arrived); the last 4 layers are kept. */
  var thumbImgs = new Map();
  function layerThumbs(l) {
    if (thumbImgs.has(l)) return thumbImgs.get(l);
    var lines = SERVE ? (layers[l] ? layers[l].thumbs : null) : LINES.slice(l * H, (l + 1) * H);
    if (!lines) return null;
    var off = document.createElement('canvas');
    off.width = thumbGeo.w;
    off.height = thumbGeo.h;
    var ctx = off.getContext('2d');
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, off.width, off.height);
    ctx.font = '11px ' + FONT;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    for (var h = 0; h < H; h++) {
      var x = (h % thumbGeo.cols) * thumbGeo.cell + 2, y = Math.floor(h / thumbGeo.cols) * thumbGeo.cell + 14;
      drawThumb(ctx, cache.get(l * H + h) || parseLine(lines[h]), x, y);
      ctx.fillStyle = '#222';
      ctx.fillText('H' + h, x + THUMB / 2, y - 13);
    }
    thumbImgs.set(l, off);
    if (thumbImgs.size > 4) thumbImgs.delete(thumbImgs.keys().next().value);
    return off;
  }

  /* The head grid of the layer: one log-scale thumbnail per head (|w|),
   * the current head outlined; a click selects a head. */
  function drawThumbs() {
    var cols = Math.min(H, 8), rowsN = Math.ceil(H / cols), cell = THUMB + 18;
    thumbGeo = { cols: cols, cell: cell, w: cols * cell, h: rowsN * cell };
    var c = $('thumbs'), ctx = setupCanvas(c, thumbGeo.w, thumbGeo.h), l = state.layer, img = layerThumbs(l);
    $('thumbstitle').textContent = 'All heads of layer ' + l + ' (log scale; click one to show it)';
    if (!img) return;
    ctx.drawImage(img, 0, 0, thumbGeo.w, thumbGeo.h);
    for (var h = 0; h < H; h++) {
      var x = (h % cols) * cell + 2, y = Math.floor(h / cols) * cell + 14;
      ctx.strokeStyle = h === state.head ? '#d62728' : '#999';
      ctx.lineWidth = h === state.head ? 2 : 1;
      ctx.strokeRect(x - 0.5, y - 0.5, THUMB + 1, THUMB + 1);
    }
  }

  function thumbHead(ev) {
    var r = $('thumbs').getBoundingClientRect(), sc = thumbGeo.w / r.width;
    var x = (ev.clientX - r.left) * sc, y = (ev.clientY - r.top) * sc;
    var h = Math.floor(y / thumbGeo.cell) * thumbGeo.cols + Math.floor(x / thumbGeo.cell);
    return x < 0 || y < 0 || x >= thumbGeo.cols * thumbGeo.cell || h >= H ? -1 : h;
  }

  /* The sparsity view: per layer, the share of the keys a query needs for
   * 95 % of its attention mass (bars: mean over heads; dots: each head). */
  function drawSparsity() {
    var w = Math.max(260, Math.min(900, 40 + L * 22)), h = 200, ml = 44, mb = 34, pw = w - ml - 10, ph = h - mb - 10;
    var c = $('sparsity'), ctx = setupCanvas(c, w, h), bw = pw / L, known = 0;
    ctx.strokeStyle = '#222';
    ctx.lineWidth = 1;
    ctx.font = '11px ' + FONT;
    ctx.fillStyle = '#222';
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    [0, 25, 50, 75, 100].forEach(function (p) {
      var y = 10 + ph - p / 100 * ph;
      ctx.fillText(p + ' %', ml - 4, y);
      ctx.strokeStyle = '#ddd';
      ctx.beginPath(); ctx.moveTo(ml, y + 0.5); ctx.lineTo(ml + pw, y + 0.5); ctx.stroke();
    });
    for (var l = 0; l < L; l++) {
      var s = D.stats ? D.stats[l] : layers[l] ? layers[l].stats : null, x = ml + l * bw;
      ctx.fillStyle = '#222';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      if (L <= 40 || l % 2 === 0) ctx.fillText(String(l), x + bw / 2, 14 + ph);
      if (!s) continue;
      known++;
      var m = 0;
      s.forEach(function (x1) { m += x1.budget95_frac / s.length; });
      ctx.fillStyle = l === state.layer ? '#d62728' : '#1f77b4';
      ctx.fillRect(x + bw * 0.15, 10 + ph - m * ph, bw * 0.7, m * ph);
      ctx.fillStyle = '#222';
      s.forEach(function (x1) { ctx.fillRect(x + bw / 2 - 1, 10 + ph - x1.budget95_frac * ph - 1, 3, 3); });
    }
    ctx.textAlign = 'center';
    ctx.fillText('Layer', ml + pw / 2, h - 14);
    $('sparsitynote').textContent = 'Share of the keys a query needs to keep ' + Math.round(100 * D.budget_share) +
        ' % of its attention mass, mean over queries: bars are the mean over the layer\u2019s heads, dots single ' +
        'heads (the statistic behind per-layer KV-cache budgets). ' +
        (known < L ? known + ' of ' + L + ' layers computed so far (the server computes a layer when it is first shown).' : '');
    $('sparsity-all').hidden = !SERVE || known === L;
  }

  /* ---- the text, shaded by the hovered query's weights ---- */
  var spans = [];
  function buildText() {
    var box = $('text'), frag = document.createDocumentFragment();
    for (var i = 0; i < T; i++) {
      var sp = document.createElement('span'), b = D.pieces ? -1 : D.bytes[i];
      if (D.pieces) sp.textContent = D.pieces[i].replace(/\\([\\nt])/g, function (m, c) {
        return c === 'n' ? '\u21b5\n' : c === 't' ? '\u21e5' : '\\'; });
      else if (b === 10) { sp.textContent = '\u21b5\n'; sp.className = 'ctl'; }
      else if (b === 9) { sp.textContent = '\u21e5'; sp.className = 'ctl'; }
      else if (b >= 32 && b < 127) sp.textContent = String.fromCharCode(b);
      else { sp.textContent = '\\x' + (b < 16 ? '0' : '') + b.toString(16); sp.className = 'ctl'; }
      sp.dataset.i = String(i);
      spans.push(sp);
      frag.appendChild(sp);
    }
    box.appendChild(frag);
  }

  var shaded = false;
  /* shades the text by the weights of query q (a token position) over its keys */
  function shadeText(q, k) {
    var W = cur, n = currentNorm(), f = W.f, a = Math.floor(q / f), m = 0, j, exact = exactRow(q);
    var val = function (jj) {
      if (CAUSAL && jj > q) return null;
      return exact ? exact[jj] : value(W, a, Math.floor(jj / f));
    };
    for (j = 0; j < T; j++) {
      var w = val(j);
      if (w !== null && Math.abs(w) > m) m = Math.abs(w);
    }
    for (j = 0; j < T; j++) {
      var v = val(j), al = 0, sp = spans[j];
      if (v !== null && v !== 0 && m > 0)
        al = n.log ? Math.max(0, Math.min(1, (Math.log10(Math.abs(v)) + 6) / 6)) : Math.abs(v) / m;
      sp.style.backgroundColor = al > 0 ? (v > 0 ? 'rgba(255,127,14,' : 'rgba(31,119,180,') + (0.85 * al).toFixed(3) + ')' : '';
      var cls = (sp.className.indexOf('ctl') >= 0 ? 'ctl' : '') + (j === q ? ' q' : '') + (j === k ? ' k' : '');
      sp.className = cls.trim();
    }
    shaded = true;
    var box = $('text'), s = spans[q];
    if (s.offsetTop < box.scrollTop || s.offsetTop > box.scrollTop + box.clientHeight - 20)
      box.scrollTop = s.offsetTop - box.clientHeight / 2;
  }

  /* the exact weights of query q of the current head, when known: the
   * head's own (exact heads) or a row fetched from the server */
  function exactRow(q) {
    if (cur.exact) {
      var r = new Float32Array(T);
      for (var j = 0; j < T; j++) r[j] = CAUSAL && j > q ? 0 : value(cur, q, j);
      return r;
    }
    return rows.get(state.layer + ',' + state.head + ',' + q) || null;
  }

  /* serve: fetches the exact row of query q of the current head, then calls back */
  function fetchRow(q, done) {
    var l = state.layer, h = state.head, key = l + ',' + h + ',' + q;
    if (!SERVE || cur.exact || cur.f !== 1 || rows.has(key)) return;
    get('api/row?layer=' + l + '&head=' + h + '&q=' + q).then(function (text) {
      rows.set(key, b64floats(text));
      if (rows.size > 4096) rows.delete(rows.keys().next().value);
      if (state.layer === l && state.head === h) done();
    }).catch(fail);
  }

  function clearText() {
    if (!shaded) return;
    spans.forEach(function (sp) {
      sp.style.backgroundColor = '';
      sp.className = sp.className.indexOf('ctl') >= 0 ? 'ctl' : '';
    });
    shaded = false;
  }

  /* ---- tooltip ---- */
  function showTip(ev, lines) {
    var tip = $('tip');
    tip.textContent = '';
    lines.forEach(function (l) {
      var d = document.createElement('div');
      l.forEach(function (part) {
        var sp = document.createElement('span');
        sp.textContent = part[0];
        if (part[1]) sp.id = part[1];
        if (part[2]) sp.className = part[2];
        d.appendChild(sp);
      });
      tip.appendChild(d);
    });
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14, r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - 10;
    if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - 10;
    tip.style.left = Math.max(0, x) + 'px';
    tip.style.top = Math.max(0, y) + 'px';
  }

  function hideTip() { $('tip').hidden = true; }

  /* tooltip lines of display cell (a, b): positions and tokens (ranges when
   * a cell holds several), the weight, exact when known */
  function mapTip(ev, cell) {
    var f = cur.f, w = value(cur, cell.q, cell.k), r = f === 1 ? exactRow(cell.q) : null, text;
    if (w === null) text = 'masked';
    else if (r) text = fmtW(r[cell.k]);
    else text = '\u2248 ' + fmtW(w) + (f > 1 ? ' (largest of the ' + f + ' \u00d7 ' + f + ' pairs)' : '');
    var pos = function (a) { return f === 1 ? String(a) : (a * f) + '\u2013' + Math.min(T - 1, a * f + f - 1); };
    var name = function (a) { return f === 1 ? tokName(a) : tokName(a * f) + '\u2026'; };
    showTip(ev, [
      [['Query ', ''], [pos(cell.q), 'tip-q', 'v'], [' ', ''], [name(cell.q), 'tip-qc', 'v']],
      [['Key ', ''], [pos(cell.k), 'tip-k', 'v'], [' ', ''], [name(cell.k), 'tip-kc', 'v']],
      [['Weight ', ''], [text, 'tip-w', 'v']],
      [['Layer ' + state.layer + ' Head ' + state.head, 'tip-head']]]);
    return w !== null && !r;
  }

  function onMapMove(ev) {
    var cell = mapCell(ev);
    if (!cell) { hideTip(); clearText(); return; }
    state.q = cell.q;
    state.k = cell.k;
    var x = { clientX: ev.clientX, clientY: ev.clientY };
    if (mapTip(ev, cell))
      fetchRow(cell.q, function () {
        if (state.q === cell.q && state.k === cell.k && !$('tip').hidden) { mapTip(x, cell); shadeText(cell.q, cell.k); }
      });
    var f = cur.f;
    shadeText(Math.min(T - 1, cell.q * f), f === 1 ? cell.k : -1);
  }

  function onSimMove(ev) {
    var cell = simCell(ev);
    if (!cell) { hideTip(); return; }
    var v = D.similarity[state.layer].matrix[cell.i][cell.j];
    showTip(ev, [[['Heads ' + cell.i + ' and ' + cell.j, 'tip-heads']],
                 [['s = ', ''], [v === null ? 'n/a' : v.toFixed(4), 'tip-s', 'v']],
                 [['Click: show head ' + simTarget(cell), 'tip-click']]]);
  }

  function onTextMove(ev) {
    var t = ev.target;
    if (!t.dataset || t.dataset.i === undefined) return;
    var q = parseInt(t.dataset.i, 10);
    showTip(ev, [[['Query ', ''], [String(q), 'tip-q', 'v'], [' ', ''], [tokName(q), 'tip-qc', 'v']],
                 [['Shading: its weights over keys 0..' + (CAUSAL ? q : T - 1), '']]]);
    shadeText(q, -1);
  }

  function saveHash() {
    try {
      history.replaceState(null, '', '#layer=' + state.layer + '&head=' + state.head + '&scale=' + state.scale);
    } catch (e) { /* some file:// settings refuse; the view still works */ }
  }

  /* Shows (l, h): the map as soon as its head is here, statistics and
   * thumbnails when the layer's are. Returns a Promise of the drawn map. */
  var shown = 0;
  function select(l, h) {
    state.layer = Math.max(0, Math.min(L - 1, l));
    state.head = Math.max(0, Math.min(H - 1, h));
    $('layer').value = String(state.layer);
    $('head').value = String(state.head);
    hideTip();
    if (cur) clearText();
    drawSim();
    var want = ++shown, lay = state.layer, hd = state.head;
    saveHash();
    drawStats();
    /* the map first: the server answers one request at a time, and a new
     * layer's statistics take all of its heads */
    return loadHead(lay, hd).then(function (W) {
      if (want === shown) {
        cur = W;
        drawMap();
      }
      return loadLayer(lay);
    }).then(function () {
      if (state.layer !== lay) return;
      drawStats();
      drawThumbs();
      drawSparsity();
      if (SERVE && want === shown && state.scale === 'linear') drawMap(); /* its range from the statistics */
    }).catch(fail);
  }

  function setScale(s) {
    state.scale = s === 'linear' ? 'linear' : 'log';
    $('scale-' + state.scale).checked = true;
    if (cur) drawMap();
    saveHash();
  }

  /* serve: fetches every layer's statistics in turn, for the sparsity view */
  function loadAllLayers() {
    if (!SERVE) return Promise.resolve(); /* the file has every layer's statistics */
    var l = 0;
    var next = function () {
      while (l < L && layers[l]) l++;
      if (l >= L) return Promise.resolve();
      return loadLayer(l).then(function () { drawSparsity(); return next(); });
    };
    return next().catch(fail);
  }

  function options(sel, n) {
    for (var i = 0; i < n; i++) {
      var o = document.createElement('option');
      o.value = o.textContent = String(i);
      sel.appendChild(o);
    }
  }

  function start() {
    D = JSON.parse($('al-data').textContent);
    L = D.layers; H = D.heads; T = D.tokens; CAUSAL = D.causal;
    SERVE = D.serve || null;
    TOKEN = new URLSearchParams(location.search).get('token') || '';
    LINES = $('al-weights').textContent.split('\n').map(function (s) { return s.trim(); })
      .filter(function (s) { return s.length > 0; });
    if (!SERVE && LINES.length !== L * H) throw new Error('attnlab explore: the page holds ' + LINES.length +
                                                ' heads of weights, expected ' + L * H + ' (file damaged?)');
    VIR = lut(D.colormaps.viridis);
    RDY = lut(D.colormaps.RdYlBu_r);
    document.title = 'attnlab explore: ' + D.title;
    $('title').textContent = D.title;
    $('subtitle').textContent = D.score_title + ' \u00b7 ' + D.attention.toUpperCase() + ', ' + L + ' layers \u00d7 ' +
        H + ' heads \u00b7 the first ' + T + (D.pieces ? ' tokens of ' : ' bytes of ') + D.text + (T > D.trained_context ?
        ' (longer than the ' + D.trained_context + ' tokens the model was trained at)' : '') +
        ' \u00b7 model ' + D.model;
    var nq = LINES.filter(function (s) { return s.charAt(0) === '~'; }).length;
    $('footer').textContent = 'Written by ' + D.generator + '. ' + (SERVE ?
        'Served by the program: each head is computed on request from the forward\u2019s queries and keys; the map ' +
        'arrives as a 1-byte log-scale display map (7 decades below the head\u2019s largest weight, within 3.3 %), ' +
        'the tooltip shows the exact float32 weight fetched from the server. ' :
        nq === 0 ? 'Embedded: the weights of all ' + L * H +
        ' heads as exact float32 (the values attnlab attnmap writes to its NPY), little-endian, base64, ' +
        (CAUSAL ? 'lower triangle only (row q holds keys 0..q)' : 'full rows') + '; ' :
        'Embedded: ' + (L * H - nq) + (L * H - nq === 1 ? ' head' : ' heads') + ' as exact float32 (the values attnlab attnmap writes to its NPY) and ' + nq +
        ' as display maps of ' + Math.ceil(T / D.display_factor) + ' \u00d7 ' + Math.ceil(T / D.display_factor) +
        ' cells (' + D.display_factor + ' \u00d7 ' + D.display_factor + ' token pairs a cell, the largest magnitude ' +
        'kept), quantised to 1 byte a cell on a log scale over 7 decades below the head\u2019s largest weight: ' +
        'their colours and tooltips are within 3.3 % of the weight (6.7 % for signed weights). ') +
        'Statistics and head similarity as JSON. Colour maps: matplotlib\u2019s viridis and RdYlBu_r. ' +
        'This product includes color specifications and designs developed by Cynthia Brewer (http://colorbrewer.org/).';
    options($('layer'), L);
    options($('head'), H);
    buildText();
    var hp = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
      var p = kv.split('=');
      if (p.length === 2) hp[p[0]] = p[1];
    });
    state.scale = hp.scale === 'linear' ? 'linear' : 'log';
    $('scale-' + state.scale).checked = true;
    $('layer').addEventListener('change', function () { select(parseInt(this.value, 10), state.head); });
    $('head').addEventListener('change', function () { select(state.layer, parseInt(this.value, 10)); });
    $('scale-log').addEventListener('change', function () { setScale('log'); });
    $('scale-linear').addEventListener('change', function () { setScale('linear'); });
    $('map').addEventListener('mousemove', onMapMove);
    $('map').addEventListener('mouseleave', function () { hideTip(); clearText(); });
    $('sim').addEventListener('mousemove', onSimMove);
    $('sim').addEventListener('mouseleave', hideTip);
    $('sim').addEventListener('click', function (ev) {
      var cell = simCell(ev);
      if (cell) select(state.layer, simTarget(cell));
      onSimMove(ev);
    });
    $('heads').addEventListener('click', function (ev) {
      var tr = ev.target.closest('tr');
      if (tr && tr.dataset.head !== undefined) select(state.layer, parseInt(tr.dataset.head, 10));
    });
    $('text').addEventListener('mouseover', onTextMove);
    $('text').addEventListener('mouseleave', function () { hideTip(); clearText(); });
    $('thumbs').addEventListener('click', function (ev) {
      var h = thumbHead(ev);
      if (h >= 0) select(state.layer, h);
    });
    $('sparsity-all').addEventListener('click', loadAllLayers);
    /* for scripts and tests: where a cell is on screen, in client coordinates */
    window.attnlabExplore = {
      select: select,
      setScale: setScale,
      loadAllLayers: loadAllLayers,
      state: function () { return { layer: state.layer, head: state.head, scale: state.scale }; },
      /* resolves when no request to the server is outstanding */
      idle: function () { return pending === 0 ? Promise.resolve() : new Promise(function (r) { idleWaiters.push(r); }); },
      head: function () { return cur ? { exact: cur.exact, f: cur.f, D: cur.D } : null; },
      cellCenter: function (q, k) {
        var r = $('map').getBoundingClientRect(), sc = r.width / geo.w, a = Math.floor(q / geo.f), b = Math.floor(k / geo.f);
        return { x: r.left + (geo.ml + (a + 0.5) * geo.s) * sc, y: r.top + (geo.mt + (b + 0.5) * geo.s) * sc };
      },
      simCellCenter: function (i, j) {
        var r = $('sim').getBoundingClientRect(), sc = r.width / simGeo.w;
        return { x: r.left + (simGeo.ml + (j + 0.5) * simGeo.c) * sc, y: r.top + (simGeo.mt + (i + 0.5) * simGeo.c) * sc };
      },
      thumbCenter: function (h) {
        var r = $('thumbs').getBoundingClientRect(), sc = r.width / thumbGeo.w;
        return { x: r.left + ((h % thumbGeo.cols) * thumbGeo.cell + 2 + THUMB / 2) * sc,
                 y: r.top + (Math.floor(h / thumbGeo.cols) * thumbGeo.cell + 14 + THUMB / 2) * sc };
      },
      mapRect: function () {
        var r = $('map').getBoundingClientRect(), sc = r.width / geo.w;
        return { x: r.left + geo.ml * sc, y: r.top + geo.mt * sc, size: geo.S * sc };
      }
    };
    select(parseInt(hp.layer || '0', 10) || 0, parseInt(hp.head || '0', 10) || 0).then(function () {
      return SERVE ? window.attnlabExplore.idle() : null;
    }).then(function () { document.body.dataset.ready = '1'; });
  }

  try {
    start();
  } catch (e) {
    $('error').textContent = String(e && e.message ? e.message : e);
    throw e;
  }
})();
