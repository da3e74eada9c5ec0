'use strict';
/* attnlab explore: draws one head's weights, its statistics and its layer's
 * head similarity from the data embedded above; nothing is fetched. */
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var D, LINES, L, H, T, CAUSAL, VIR, RDY;
  var state = { layer: 0, head: 0, scale: 'log', q: -1, k: -1 };
  var cache = new Map();
  var geo = null, simGeo = null;
  var SUP = { '-': '\u207b', '0': '\u2070', '1': '\u00b9', '2': '\u00b2', '3': '\u00b3', '4': '\u2074',
              '5': '\u2075', '6': '\u2076', '7': '\u2077', '8': '\u2078', '9': '\u2079' };
  var FONT = '"DejaVu Sans", "Helvetica Neue", Arial, sans-serif';

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

  /* The weights of (layer, head) as a Float32Array, decoded on first use;
   * the 16 most recently used heads stay decoded. */
  function weights(l, h) {
    var key = l * H + h;
    if (cache.has(key)) {
      var w = cache.get(key);
      cache.delete(key);
      cache.set(key, w);
      return w;
    }
    var bin = atob(LINES[key]), n = bin.length, bytes = new Uint8Array(n);
    for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
    var dv = new DataView(bytes.buffer), out = new Float32Array(n >> 2);
    for (var j = 0; j < out.length; j++) out[j] = dv.getFloat32(4 * j, true);
    cache.set(key, out);
    if (cache.size > 16) cache.delete(cache.keys().next().value);
    return out;
  }

  /* weight of query q on key k, or null where the mask hides the pair */
  function value(W, q, k) {
    if (CAUSAL) return k > q ? null : W[q * (q + 1) / 2 + k];
    return W[q * T + k];
  }

  function stats(l, h) { return D.stats[l][h]; }

  /* The colour scale of the current head: log 1e-6..1 on viridis, or linear
   * 0..max on viridis (symmetric on RdYlBu_r when the head has negative weights). */
  function currentNorm() {
    var s = stats(state.layer, state.head);
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
    var W = weights(state.layer, state.head), n = currentNorm(), table = n.lut;
    var s = T >= 512 ? 1 : Math.floor(512 / T), S = T * s;
    geo = { s: s, S: S, ml: 64, mt: 8 };
    var cw = geo.ml + S + 18 + 16 + 58, ch = geo.mt + S + 48;
    var c = $('map'), ctx = setupCanvas(c, cw, ch);
    geo.w = cw;
    var off = document.createElement('canvas');
    off.width = T;
    off.height = T;
    var octx = off.getContext('2d'), img = octx.createImageData(T, T), px = img.data;
    for (var k = 0; k < T; k++) {
      for (var q = 0; q < T; q++) {
        var t = normT(n, value(W, q, k)), o = 4 * (k * T + q);
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
    var st = tickStep(s, 40);
    ctx.fillStyle = '#222';
    ctx.font = '11px ' + FONT;
    for (var v = 0; v < T; v += st) {
      var p = Math.round((v + 0.5) * s) + 0.5;
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
        T + ' \u00d7 ' + T + ' cells, ' + s + ' px each, nothing averaged.';
  }

  /* cell (q, k) under a mouse event on the map, or null */
  function mapCell(ev) {
    var r = $('map').getBoundingClientRect(), sc = geo.w / r.width;
    var x = (ev.clientX - r.left) * sc - geo.ml, y = (ev.clientY - r.top) * sc - geo.mt;
    var q = Math.floor(x / geo.s), k = Math.floor(y / geo.s);
    return q < 0 || k < 0 || q >= T || k >= T ? null : { q: q, k: k };
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
    [['Sink mass (weight on token 0)', fmt(s.sink_mass, 4)], ['Entropy (nats)', fmt(s.entropy, 3)],
     ['Mean distance (tokens)', fmt(s.mean_distance, 2)], ['Top-' + D.topk + ' mass', fmt(s.topk_mass, 4)],
     ['Row sum', fmt(s.row_sum, 4)], ['Smallest weight', fmtW(s.min)], ['Largest weight', fmtW(s.max)]]
      .forEach(function (r) { t.appendChild(row(document.createElement('tr'), r, 'td')); });
    $('statstitle').textContent = 'Head statistics, layer ' + state.layer + ' head ' + state.head;
    var hs = $('heads');
    hs.textContent = '';
    var th = document.createElement('thead');
    th.appendChild(row(document.createElement('tr'), ['Head', 'Sink', 'Entropy', 'Distance', 'Top-' + D.topk], 'th'));
    hs.appendChild(th);
    var tb = document.createElement('tbody');
    for (var h = 0; h < H; h++) {
      var x = stats(state.layer, h);
      var tr = row(document.createElement('tr'), [String(h), fmt(x.sink_mass, 3), fmt(x.entropy, 2),
        fmt(x.mean_distance, 1), fmt(x.topk_mass, 3)], 'td');
      if (h === state.head) tr.className = 'current';
      tr.dataset.head = String(h);
      tb.appendChild(tr);
    }
    hs.appendChild(tb);
    $('headstitle').textContent = 'Heads of layer ' + state.layer + ' (click a row to show it)';
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
  function shadeText(q, k) {
    var W = weights(state.layer, state.head), n = currentNorm(), m = 0, j;
    for (j = 0; j < T; j++) {
      var w = value(W, q, j);
      if (w !== null && Math.abs(w) > m) m = Math.abs(w);
    }
    for (j = 0; j < T; j++) {
      var v = value(W, q, j), a = 0, sp = spans[j];
      if (v !== null && v !== 0 && m > 0)
        a = n.log ? Math.max(0, Math.min(1, (Math.log10(Math.abs(v)) + 6) / 6)) : Math.abs(v) / m;
      sp.style.backgroundColor = a > 0 ? (v > 0 ? 'rgba(255,127,14,' : 'rgba(31,119,180,') + (0.85 * a).toFixed(3) + ')' : '';
      var cls = (sp.className.indexOf('ctl') >= 0 ? 'ctl' : '') + (j === q ? ' q' : '') + (j === k ? ' k' : '');
      sp.className = cls.trim();
    }
    shaded = true;
    var box = $('text'), s = spans[q];
    if (s.offsetTop < box.scrollTop || s.offsetTop > box.scrollTop + box.clientHeight - 20)
      box.scrollTop = s.offsetTop - box.clientHeight / 2;
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

  function onMapMove(ev) {
    var cell = mapCell(ev);
    if (!cell) { hideTip(); clearText(); return; }
    var W = weights(state.layer, state.head), w = value(W, cell.q, cell.k);
    showTip(ev, [
      [['Query ', ''], [String(cell.q), 'tip-q', 'v'], [' ', ''], [tokName(cell.q), 'tip-qc', 'v']],
      [['Key ', ''], [String(cell.k), 'tip-k', 'v'], [' ', ''], [tokName(cell.k), 'tip-kc', 'v']],
      [['Weight ', ''], [fmtW(w), 'tip-w', 'v']],
      [['Layer ' + state.layer + ' Head ' + state.head, 'tip-head']]]);
    shadeText(cell.q, cell.k);
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

  function select(l, h) {
    state.layer = Math.max(0, Math.min(L - 1, l));
    state.head = Math.max(0, Math.min(H - 1, h));
    $('layer').value = String(state.layer);
    $('head').value = String(state.head);
    hideTip();
    clearText();
    drawMap();
    drawSim();
    drawStats();
    saveHash();
  }

  function setScale(s) {
    state.scale = s === 'linear' ? 'linear' : 'log';
    $('scale-' + state.scale).checked = true;
    drawMap();
    saveHash();
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
    LINES = $('al-weights').textContent.split('\n').map(function (s) { return s.trim(); })
      .filter(function (s) { return s.length > 0; });
    if (LINES.length !== L * H) throw new Error('attnlab explore: the page holds ' + LINES.length +
                                                ' heads of weights, expected ' + L * H + ' (file damaged?)');
    VIR = lut(D.colormaps.viridis);
    RDY = lut(D.colormaps.RdYlBu_r);
    document.title = 'attnlab explore: ' + D.title;
    $('title').textContent = D.title;
    $('subtitle').textContent = D.score_title + ' \u00b7 ' + D.attention.toUpperCase() + ', ' + L + ' layers \u00d7 ' +
        H + ' heads \u00b7 the first ' + T + (D.pieces ? ' tokens of ' : ' bytes of ') + D.text + (T > D.trained_context ?
        ' (longer than the ' + D.trained_context + ' tokens the model was trained at)' : '') +
        ' \u00b7 model ' + D.model;
    $('footer').textContent = 'Written by ' + D.generator + '. Embedded: the weights of all ' + L * H +
        ' heads as exact float32 (the values attnlab attnmap writes to its NPY), little-endian, base64, ' +
        (CAUSAL ? 'lower triangle only (row q holds keys 0..q)' : 'full rows') +
        '; statistics and head similarity as JSON. Colour maps: matplotlib\u2019s viridis and RdYlBu_r. ' +
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
    select(parseInt(hp.layer || '0', 10) || 0, parseInt(hp.head || '0', 10) || 0);
    /* for scripts and tests: where a cell is on screen, in client coordinates */
    window.attnlabExplore = {
      select: select,
      setScale: setScale,
      state: function () { return { layer: state.layer, head: state.head, scale: state.scale }; },
      cellCenter: function (q, k) {
        var r = $('map').getBoundingClientRect(), sc = r.width / geo.w;
        return { x: r.left + (geo.ml + (q + 0.5) * geo.s) * sc, y: r.top + (geo.mt + (k + 0.5) * geo.s) * sc };
      },
      simCellCenter: function (i, j) {
        var r = $('sim').getBoundingClientRect(), sc = r.width / simGeo.w;
        return { x: r.left + (simGeo.ml + (j + 0.5) * simGeo.c) * sc, y: r.top + (simGeo.mt + (i + 0.5) * simGeo.c) * sc };
      },
      mapRect: function () {
        var r = $('map').getBoundingClientRect(), sc = r.width / geo.w;
        return { x: r.left + geo.ml * sc, y: r.top + geo.mt * sc, size: geo.S * sc };
      }
    };
    document.body.dataset.ready = '1';
  }

  try {
    start();
  } catch (e) {
    $('error').textContent = String(e && e.message ? e.message : e);
    throw e;
  }
})();
