/* editlens report: leaderboard plots, editor comparison, edit cards, an image inspector, and the
   view state in the address. Plain JavaScript, no network. Knows no evaluator by name: boxes,
   colours, verdict tags and what a score measures come with the data (from each evaluator's spec). */
(function () {
  "use strict";
  var DATA = JSON.parse((document.getElementById("report-data") || {}).textContent || "{}");
  var SAMPLES = DATA.samples || [];
  var PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974", "#64B5CD"];
  var THUMBS = null, FULL = null;
  function thumbs() { if (!THUMBS) { THUMBS = JSON.parse(document.getElementById("report-thumbs").textContent || "{}"); } return THUMBS; }
  function fulls() { if (!FULL) { var n = document.getElementById("report-full"); FULL = JSON.parse((n && n.textContent) || "{}"); } return FULL; }

  // ------------------------------------------------------------------------------------------ helpers
  function el(tag, attrs, kids) {
    var n = document.createElement(tag);
    if (attrs) { Object.keys(attrs).forEach(function (k) {
      if (k === "text") { n.textContent = attrs[k]; } else if (attrs[k] !== null && attrs[k] !== undefined) { n.setAttribute(k, attrs[k]); }
    }); }
    (kids || []).forEach(function (c) { if (c !== null && c !== undefined && c !== false) { n.appendChild(typeof c === "string" ? document.createTextNode(c) : c); } });
    return n;
  }
  var SVGNS = "http://www.w3.org/2000/svg";
  function sv(tag, attrs, text) {
    var n = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    if (text !== undefined) { n.textContent = text; }
    return n;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "–"; }
    if (typeof v !== "number") { return String(v); }
    var a = Math.abs(v);
    return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : String(Number(v.toPrecision(4)));
  }
  function chip(cls, text, title) { return el("span", {"class": "chip " + cls, text: text, title: title || null}); }
  function slug(t) { return String(t).replace(/\s+/g, "-"); }
  function on(id, evt, fn) { var n = document.getElementById(id); if (n) { n.addEventListener(evt, fn); } return n; }
  function measureOf(ev) { return (DATA.measures || {})[ev]; }
  function directionWords(ev) {
    var hib = (DATA.hib || {})[ev];
    if (hib === null || hib === undefined) { return "direction unknown"; }
    if (measureOf(ev) === "similarity") { return (hib ? "higher" : "lower") + " = closer to the source"; }
    return (hib ? "higher" : "lower") + " is better";
  }
  var MODEL_COLOUR = {};
  (DATA.models || []).forEach(function (m, i) { MODEL_COLOUR[m] = PALETTE[i % PALETTE.length]; });

  // in-page links scroll without replacing the view state kept in the address
  Array.prototype.forEach.call(document.querySelectorAll('nav.toc a[href^="#"]'), function (a) {
    a.addEventListener("click", function (e) {
      var t = document.getElementById(a.getAttribute("href").slice(1));
      if (t) { e.preventDefault(); t.scrollIntoView(); }
    });
  });

  // ------------------------------------------------------------------------------------------ SVG plots
  function niceTicks(lo, hi, n) {
    if (!isFinite(lo) || !isFinite(hi)) { return [0, 1]; }
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) { out.push(Number(v.toPrecision(10))); }
    return out;
  }
  function quantile(sorted, q) {
    if (!sorted.length) { return NaN; }
    var pos = (sorted.length - 1) * q, b = Math.floor(pos), r = pos - b;
    return b + 1 < sorted.length ? sorted[b] + r * (sorted[b + 1] - sorted[b]) : sorted[b];
  }
  function rand(seed) { var s = seed >>> 0 || 1; return function () { s = (s * 1664525 + 1013904223) >>> 0; return s / 4294967296; }; }
  function short(t, n) { t = String(t); return t.length > n ? t.slice(0, n - 1) + "…" : t; }

  /* A horizontal panel: one row per label, x scale from lo..hi; draw(row, y, x) adds marks. */
  function panel(title, labels, lo, hi, xlabel, draw, ylabel) {
    // a long axis name is set on two lines (split before its parenthesis), never cut at the edge
    var cut = xlabel.length > 44 ? xlabel.lastIndexOf(" (") : -1;
    var xlines = cut > 0 ? [xlabel.slice(0, cut), xlabel.slice(cut + 1)] : [xlabel];
    var W = 380, left = 104, right = 14, top = title ? 40 : 22, rowH = 24, H = top + rowH * labels.length + 42 + 14 * (xlines.length - 1);
    var svg = sv("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title + ": " + xlabel});
    if (title) { svg.appendChild(sv("text", {x: 4, y: 16, "font-size": 12, "font-weight": 600}, title)); }
    // the rows' axis: its name heads the row labels
    svg.appendChild(sv("text", {x: left - 6, y: top - 6, "font-size": 10, "text-anchor": "end", "font-style": "italic",
                                "class": "ylabel"}, ylabel || "editor"));
    var ticks = niceTicks(lo, hi, 5);
    lo = Math.min(lo, ticks[0]); hi = Math.max(hi, ticks[ticks.length - 1]);
    function x(v) { return left + (W - left - right) * (hi === lo ? 0.5 : (v - lo) / (hi - lo)); }
    var bottom = top + rowH * labels.length;
    ticks.forEach(function (t) {
      svg.appendChild(sv("line", {x1: x(t), x2: x(t), y1: top, y2: bottom, stroke: "#e3e7ee"}));
      svg.appendChild(sv("text", {x: x(t), y: bottom + 13, "font-size": 10, "text-anchor": "middle"}, fmt(t)));
    });
    svg.appendChild(sv("line", {x1: left, x2: W - right, y1: bottom, y2: bottom, stroke: "#9aa3b2"}));
    var xl = sv("text", {x: W / 2, y: bottom + 30, "font-size": 11, "text-anchor": "middle", "class": "xlabel"}, xlines.length > 1 ? "" : xlabel);
    if (xlines.length > 1) {
      xlines.forEach(function (line, i) { xl.appendChild(sv("tspan", {x: W / 2, dy: i ? 14 : 0}, line)); });
    }
    svg.appendChild(xl);
    labels.forEach(function (lab, i) {
      var y = top + rowH * i + rowH / 2;
      svg.appendChild(sv("text", {x: left - 6, y: y + 4, "font-size": 10.5, "text-anchor": "end"}, short(lab, 17)));
      draw(i, y, x, svg);
    });
    return svg;
  }

  function drawDistributions(host) {
    var models = DATA.models || [];
    (DATA.scored || []).forEach(function (ev) {
      if (measureOf(ev) === "none") { return; }
      var per = models.map(function (m) {
        return SAMPLES.filter(function (s) { var sc = s.scores[ev]; return s.model === m && sc && sc.status === "scored"; })
          .map(function (s) { return s.scores[ev].value; }).sort(function (a, b) { return a - b; });
      });
      var all = [].concat.apply([], per);
      if (!all.length) { return; }
      var lo = Math.min.apply(null, all), hi = Math.max.apply(null, all);
      var label = ((DATA.measureLabels || {})[measureOf(ev)] || "score") + " (" + directionWords(ev) + ")";
      var r = rand(7);
      var svg = panel(ev, models, lo, hi, label, function (i, y, x, g) {
        var v = per[i];
        if (!v.length) { g.appendChild(sv("text", {x: x(lo) + 4, y: y + 4, "font-size": 10, fill: "#8a8f98"}, "no scored edit")); return; }
        var q1 = quantile(v, 0.25), q2 = quantile(v, 0.5), q3 = quantile(v, 0.75), p5 = quantile(v, 0.05), p95 = quantile(v, 0.95);
        g.appendChild(sv("line", {x1: x(p5), x2: x(p95), y1: y, y2: y, stroke: "#555"}));
        g.appendChild(sv("rect", {x: x(q1), y: y - 7, width: Math.max(1, x(q3) - x(q1)), height: 14, fill: "#fff", stroke: "#333"}));
        g.appendChild(sv("line", {x1: x(q2), x2: x(q2), y1: y - 7, y2: y + 7, stroke: "#111", "stroke-width": 2}));
        var step = Math.max(1, Math.ceil(v.length / 300));
        for (var k = 0; k < v.length; k += step) {
          g.appendChild(sv("circle", {cx: x(v[k]), cy: y + (r() - 0.5) * 12, r: 2, fill: MODEL_COLOUR[models[i]], "fill-opacity": 0.55}));
        }
      });
      svg.setAttribute("data-evaluator", ev);
      host.appendChild(el("div", {"class": "plot"}, [svg]));
    });
  }

  function drawLeaderboardCI(host) {
    var ev = host.getAttribute("data-evaluator"), scope = host.getAttribute("data-scope");
    var t = ((DATA.leaderboard || {}).tables || []).filter(function (x) { return x.evaluator === ev && x.scope === scope; })[0];
    if (!t) { return; }
    var lo = Infinity, hi = -Infinity;
    t.rows.forEach(function (r) { var a = r.ci ? r.ci[0] : r.mean, b = r.ci ? r.ci[1] : r.mean; lo = Math.min(lo, a, r.mean); hi = Math.max(hi, b, r.mean); });
    var svg = panel("", t.rows.map(function (r) { return (r.rank ? r.rank + ". " : "– ") + r.model; }), lo, hi,
      ev + ": mean with 95% CI (" + directionWords(ev) + ")", function (i, y, x, g) {
        var r = t.rows[i], c = r.rank ? MODEL_COLOUR[r.model] : "#9e9e9e";
        if (r.ci) { g.appendChild(sv("line", {x1: x(r.ci[0]), x2: x(r.ci[1]), y1: y, y2: y, stroke: c, "stroke-width": 2})); }
        g.appendChild(sv("circle", {cx: x(r.mean), cy: y, r: 4.5, fill: r.rank ? c : "#fff", stroke: c, "stroke-width": 1.5}));
      });
    host.appendChild(svg);
  }

  function legendOf(models) {
    return el("div", {"class": "plot-legend"}, models.map(function (m) {
      return el("span", null, [el("i", {style: "background:" + MODEL_COLOUR[m]}), m]);
    }));
  }

  function drawHumanScatter(host) {
    var h = DATA.human; if (!h) { return; }
    var used = {};
    Object.keys(h.points || {}).forEach(function (ev) {
      var pts = h.points[ev];
      var W = 360, H = 300, l = 48, r = 12, t = 30, b = 44;
      var xs = pts.map(function (p) { return p[1]; }), ys = pts.map(function (p) { return p[0]; });
      var xt = niceTicks(Math.min.apply(null, xs), Math.max.apply(null, xs), 5), yt = niceTicks(Math.min.apply(null, ys), Math.max.apply(null, ys), 5);
      var x0 = Math.min(xt[0], Math.min.apply(null, xs)), x1 = Math.max(xt[xt.length - 1], Math.max.apply(null, xs));
      var y0 = Math.min(yt[0], Math.min.apply(null, ys)), y1 = Math.max(yt[yt.length - 1], Math.max.apply(null, ys));
      function X(v) { return l + (W - l - r) * (x1 === x0 ? 0.5 : (v - x0) / (x1 - x0)); }
      function Y(v) { return H - b - (H - t - b) * (y1 === y0 ? 0.5 : (v - y0) / (y1 - y0)); }
      var rho = (h.overall || []).filter(function (c) { return c.evaluator === ev && c.method === "spearman"; })[0];
      var svg = sv("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "data-evaluator": ev});
      svg.appendChild(sv("text", {x: 4, y: 14, "font-size": 12, "font-weight": 600},
        ev + (rho && rho.value !== null ? "  ·  Spearman " + fmt(rho.value) + (rho.ci95 ? " [" + fmt(rho.ci95[0]) + ", " + fmt(rho.ci95[1]) + "]" : "") : "")));
      xt.forEach(function (v) { svg.appendChild(sv("line", {x1: X(v), x2: X(v), y1: t, y2: H - b, stroke: "#e3e7ee"}));
        svg.appendChild(sv("text", {x: X(v), y: H - b + 13, "font-size": 10, "text-anchor": "middle"}, fmt(v))); });
      yt.forEach(function (v) { svg.appendChild(sv("line", {x1: l, x2: W - r, y1: Y(v), y2: Y(v), stroke: "#e3e7ee"}));
        svg.appendChild(sv("text", {x: l - 4, y: Y(v) + 3, "font-size": 10, "text-anchor": "end"}, fmt(v))); });
      svg.appendChild(sv("text", {x: l + (W - l - r) / 2, y: H - 6, "font-size": 11, "text-anchor": "middle", "class": "xlabel"}, "human score"));
      svg.appendChild(sv("text", {x: 12, y: t + (H - t - b) / 2, "font-size": 11, "text-anchor": "middle", "class": "ylabel",
        transform: "rotate(-90 12 " + (t + (H - t - b) / 2) + ")"}, ev + " score"));
      var step = Math.max(1, Math.ceil(pts.length / 1500));
      for (var k = 0; k < pts.length; k += step) {
        used[pts[k][2]] = 1;
        svg.appendChild(sv("circle", {cx: X(pts[k][1]), cy: Y(pts[k][0]), r: 2.6, fill: MODEL_COLOUR[pts[k][2]] || "#555", "fill-opacity": 0.7}));
      }
      host.appendChild(el("div", {"class": "plot"}, [svg]));
    });
    // the legend sits outside every panel: it never covers a point
    host.parentNode.insertBefore(legendOf((DATA.models || []).filter(function (m) { return used[m]; })), host);
  }

  function drawHumanPerModel(host) {
    var h = DATA.human; if (!h || !h.per_model || !h.per_model.length) { return; }
    var rows = h.per_model.filter(function (r) { return r.value !== null; });
    if (!rows.length) { return; }
    var svg = panel("", rows.map(function (r) { return r.evaluator + " · " + r.model; }), -1, 1,
      "Spearman ρ with human scores, within the editing model (95% CI)", function (i, y, x, g) {
        var r = rows[i], c = MODEL_COLOUR[r.model] || "#555";
        if (r.ci95 && r.ci95[0] !== null) { g.appendChild(sv("line", {x1: x(r.ci95[0]), x2: x(r.ci95[1]), y1: y, y2: y, stroke: c, "stroke-width": 2})); }
        g.appendChild(sv("circle", {cx: x(r.value), cy: y, r: 4, fill: c}));
      }, "evaluator · editor");
    host.appendChild(svg);
  }

  Array.prototype.forEach.call(document.querySelectorAll("[data-plot]"), function (host) {
    var kind = host.getAttribute("data-plot");
    if (kind === "distributions") { drawDistributions(host); }
    else if (kind === "lb-ci") { drawLeaderboardCI(host); }
    else if (kind === "human-scatter") { drawHumanScatter(host); }
    else if (kind === "human-per-model") { drawHumanPerModel(host); }
  });

  var samplesSection = document.getElementById("samples");
  if (!samplesSection) { return; }  // a report without edits (meta-evaluation)

  // ------------------------------------------------------------------------------------------ state and address
  var LAYERS = DATA.layers || {};
  var multi = !document.getElementById("view-compare").hasAttribute("hidden");
  var DEF = {v: multi ? "compare" : "cards", q: "", model: "", type: "", status: "", verdict: "", metric: "", min: "", max: "",
             sort: "order", dir: "asc", page: "0", size: "24", cq: "", ctype: "", csort: "order", cby: "mean", cdir: "asc",
             cshow: "", cpage: "0", csize: "12", lbg: "all", hide: "", edit: "", lv: ""};
  var state = {};
  Object.keys(DEF).forEach(function (k) { state[k] = DEF[k]; });

  function readHash() {
    var h = location.hash.replace(/^#/, "");
    if (!h || h.indexOf("=") < 0) { return h ? {anchor: decodeURIComponent(h)} : {}; }
    var out = {};
    h.split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) { try { out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1)); } catch (e) { /* a mangled pair */ } }
    });
    return out;
  }
  function writeHash() {
    var parts = [];
    Object.keys(DEF).forEach(function (k) {
      if (String(state[k]) !== DEF[k]) { parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(state[k])); }
    });
    var h = parts.length ? "#" + parts.join("&") : "";
    if (h !== location.hash && !(h === "" && location.hash === "#")) {
      try { history.replaceState(null, "", h || location.pathname + location.search); } catch (e) { /* a page opened from disk may refuse */ }
    }
  }
  function hidden() { return state.hide ? state.hide.split(",") : []; }
  function layerShown(ev) { return hidden().indexOf(ev) < 0; }

  // ------------------------------------------------------------------------------------------ boxes on thumbnails
  SAMPLES.forEach(function (s, i) {
    s._i = i;
    s._hay = (s.id + " " + (s.instruction || "")).toLowerCase();
  });
  var BY_ID = {};
  SAMPLES.forEach(function (s) { BY_ID[s.id] = s; });

  function boxesOn(s, role) {
    return (s.boxes || []).filter(function (b) { return b.on.indexOf(role) >= 0 && layerShown(b.by); });
  }
  /* Boxes in the same place (two detectors finding one change) are drawn once, numbered with both. */
  function groupBoxes(list) {
    var seen = {}, out = [];
    list.forEach(function (b) {
      var k = b.box.map(function (v) { return Number(v).toFixed(3); }).join(",");
      if (seen[k]) {
        seen[k].ns.push(b.n);
        if (b.kind && !seen[k].b.kind) { seen[k].b = b; }  // drawn in the colour that says most (a kind's)
        return;
      }
      seen[k] = {b: b, ns: [b.n], by: b.by, rank: b.rank, n: b.n};
      out.push(seen[k]);
    });
    return out;
  }
  /* The k strongest box groups: each layer's by its rank, layers taken in turn. */
  function topK(list, k) {
    var by = {}, order = [];
    list.forEach(function (b) { if (!by[b.by]) { by[b.by] = []; order.push(b.by); } by[b.by].push(b); });
    order.forEach(function (ev) { by[ev].sort(function (a, b) {
      var ra = a.rank === null || a.rank === undefined ? -Infinity : a.rank, rb = b.rank === null || b.rank === undefined ? -Infinity : b.rank;
      return rb - ra || a.n - b.n; }); });
    var out = [];
    for (var round = 0; out.length < k; round++) {
      var added = false;
      for (var j = 0; j < order.length && out.length < k; j++) { if (by[order[j]][round]) { out.push(by[order[j]][round]); added = true; } }
      if (!added) { break; }
    }
    return out;
  }
  function boxEl(g) {
    var b = g.b;
    var x0 = Math.max(0, Math.min(b.box[0], b.box[2])), x1 = Math.min(1, Math.max(b.box[0], b.box[2]));
    var y0 = Math.max(0, Math.min(b.box[1], b.box[3])), y1 = Math.min(1, Math.max(b.box[1], b.box[3]));
    var d = el("div", {"class": "bx" + (b.dashed ? " dash" : ""), "data-by": b.by, "data-ns": g.ns.join(" "), "data-kind": b.kind,
      "data-box": b.box.join(","), style: "left:" + (100 * x0) + "%;top:" + (100 * y0) + "%;width:" + (100 * (x1 - x0)) +
      "%;height:" + (100 * (y1 - y0)) + "%;border-color:" + b.colour, title: g.ns.join(", ") + ". " + b.by + ": " + (b.label || b.kind || "")});
    d.appendChild(el("span", {"class": "num", style: "background:" + b.colour, text: g.ns.join(",")}));
    return d;
  }
  /* Number labels sit at their box's top-left corner; labels that would cover each other are
     moved down, one line per label already there. */
  function spreadLabels(host) {
    var placed = [];
    Array.prototype.forEach.call(host.querySelectorAll(".bx"), function (d) {
      var b = d.getAttribute("data-box").split(",").map(Number);
      var x = Math.min(b[0], b[2]), y = Math.min(b[1], b[3]), k = 0;
      placed.forEach(function (p) { if (Math.abs(p[0] - x) < 0.08 && Math.abs(p[1] - y) < 0.06) { k++; } });
      placed.push([x, y]);
      if (k) { d.querySelector(".num").style.top = (1.3 * k) + "em"; d.querySelector(".num").setAttribute("data-shift", k); }
    });
  }
  var THUMB_K = 4;
  function frame(s, role, k, onOpen) {
    var img = s.images[role];
    if (!img) { return null; }
    if (img.error) { return el("div", {"class": "frame"}, [el("div", {"class": "missing", text: img.error})]); }
    // made at twice the display size (sharp on 2x screens); width/height give the aspect ratio before it loads
    var pic = el("img", {src: thumbs()[img.t], alt: role + " image of " + s.id, decoding: "async",
                         width: img.tw, height: img.th});
    var f = el("div", {"class": "frame", "data-role": role, tabindex: "0", role: "button",
                       "aria-label": "inspect the " + role + " image of " + s.id}, [pic]);
    var list = k < 0 ? [] : groupBoxes(boxesOn(s, role)), shown = topK(list, k);
    shown.forEach(function (g) { f.appendChild(boxEl(g)); });
    spreadLabels(f);
    if (list.length > shown.length) {
      f.appendChild(el("span", {"class": "more", text: "+" + (list.length - shown.length) + " more"}));
    }
    f.addEventListener("click", function () { onOpen(s, role); });
    f.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onOpen(s, role); } });
    return f;
  }
  function shot(s, role, onOpen) {
    var f = frame(s, role, THUMB_K, onOpen);
    return f ? el("figure", {"class": "shot", "data-role": role}, [f, el("figcaption", {text: role})]) : null;
  }

  // ------------------------------------------------------------------------------------------ per-edit details
  function textOf(v) {  // judge texts come as a string or as {part: text} (e.g. ViEScore's SC and PQ)
    if (typeof v === "string") { return v; }
    return Object.keys(v).map(function (k) { return k + ": " + (typeof v[k] === "string" ? v[k] : JSON.stringify(v[k])); }).join("\n");
  }
  function rawBlock(label, text) { return el("details", null, [el("summary", {text: label}), el("pre", {text: text})]); }

  function scoreTable(s) {
    var rows = (DATA.evaluators || []).filter(function (ev) { return s.scores[ev]; }).map(function (ev) {
      var sc = s.scores[ev], d = sc.details || {}, layer = LAYERS[ev];
      var note = el("td", {"class": "reason"});
      if (sc.reason) { note.appendChild(document.createTextNode(sc.reason)); }
      if (layer && d.items_found !== undefined) {
        note.appendChild(el("div", {text: d.items_found ? d.items_found + " " + layer.name : layer.empty}));
      }
      if (d.reasoning) { note.appendChild(el("div", {"class": "why", text: textOf(d.reasoning)})); }
      var raw = d.raw || (d.dice && d.dice.raw);
      if (raw) { note.appendChild(rawBlock("raw answer", textOf(raw))); }
      if (!layer && !raw && Object.keys(d).length) { note.appendChild(rawBlock("details", JSON.stringify(d, null, 1))); }
      var m = measureOf(ev);
      return el("tr", {"data-evaluator": ev}, [el("td", {title: (DATA.descriptions || {})[ev] || null}, [ev,
        m && m !== "quality" ? el("span", {"class": "cnt", text: (DATA.measureLabels || {})[m] || m}) : null]),
        el("td", {"class": "num", text: fmt(sc.value)}), el("td", null, [chip(sc.status, sc.status)]), note]);
    });
    if (s.human !== undefined) {
      rows.push(el("tr", {"data-evaluator": "human"}, [el("td", {text: "human"}), el("td", {"class": "num", text: fmt(s.human)}),
        el("td"), el("td", {"class": "reason", text: "human score"})]));
    }
    return el("table", {"class": "data scores"}, [el("thead", null, [el("tr", null, [el("th", {text: "evaluator"}),
      el("th", {text: "value"}), el("th", {text: "status"}), el("th", {text: "note"})])]), el("tbody", null, rows)]);
  }

  function marks(root, n) { return root.querySelectorAll('.bx[data-ns~="' + n + '"], li[data-n="' + n + '"]'); }
  function highlight(root, n, onOff) {
    Array.prototype.forEach.call(marks(root, n), function (x) { x.classList.toggle("hl", onOff); });
  }

  /* Each box layer's items, numbered like the boxes; hovering one lights its box up. */
  function itemsBlock(s, root) {
    var blocks = [];
    Object.keys(LAYERS).forEach(function (ev) {
      var sc = s.scores[ev];
      if (!sc || !layerShown(ev)) { return; }
      var layer = LAYERS[ev], d = sc.details || {};
      var mine = (s.boxes || []).filter(function (b) { return b.by === ev; });
      var kids = [el("b", {text: ev + ": " + layer.name})];
      if (!mine.length) {
        var found = d.items_found || 0;
        kids.push(el("div", {"class": "why", text: sc.status === "unscored" || sc.status === "failed" ? sc.status + ": " + (sc.reason || "") :
          found ? found + " listed above (the same boxes)" : layer.empty}));
      }
      var FIRST = 6;  // a long list folds: the inspector shows every item
      kids.push(el("ol", null, mine.slice(0, FIRST).map(function (b) { return itemEl(b, root); })));
      if (mine.length > FIRST) {
        kids.push(el("details", null, [el("summary", {text: (mine.length - FIRST) + " more"}),
          el("ol", {start: FIRST + 1}, mine.slice(FIRST).map(function (b) { return itemEl(b, root); }))]));
      }
      blocks.push(el("div", {"class": "items", "data-layer": ev}, kids));
    });
    return blocks;
  }
  function itemEl(b, root) {
    var inline = [], text = [];
    (b.fields || []).forEach(function (f) {
      if (typeof f[1] === "number") { inline.push(f[0] + " " + fmt(f[1])); } else { text.push(f); }
    });
    var li = el("li", {"data-n": b.n, "data-by": b.by}, [el("span", {"class": "nb", style: "background:" + b.colour, text: String(b.n)}),
      el("b", {text: b.label || b.kind || "box"}), " ", b.verdict ? chip("v-" + slug(b.verdict), b.verdict) : null,
      el("span", {"class": "reason", title: "box [" + b.box.map(function (x) { return fmt(x); }).join(", ") + "]",
        text: inline.length ? "  " + inline.join(" · ") : ""})]);
    text.forEach(function (f) { li.appendChild(el("div", {"class": "why", text: f[0] + ": " + f[1]})); });
    li.addEventListener("mouseenter", function () { highlight(root(), b.n, true); });
    li.addEventListener("mouseleave", function () { highlight(root(), b.n, false); });
    return li;
  }

  /* An edit's verdict chips: an unchanged edit gets one flag ("unchanged"), not "no change" beside it. */
  function verdictChips(s) {
    var unchanged = s.unchanged && s.unchanged.length, out = [];
    (s.verdicts || []).forEach(function (v) { if (!(unchanged && v === "no change")) { out.push(chip("v-" + slug(v), v)); } });
    if (unchanged) { out.push(chip("v-unchanged", "unchanged", "found unchanged by " + s.unchanged.join(", "))); }
    return out;
  }
  function headChips(s) {
    var out = [chip("model", s.model)];
    if (s.category) { out.push(chip("cat", s.category)); }
    verdictChips(s).forEach(function (c) { out.push(c); });
    if (s.input_notes && s.input_notes.length) { out.push(chip("resized", "resized", s.input_notes.join("\n"))); }
    return out;
  }

  function card(s) {
    var art;
    var root = function () { return art; };
    art = el("article", {"class": "card", "data-id": s.id, "data-model": s.model}, [
      el("header", null, [el("span", {"class": "sid", text: s.id})].concat(headChips(s))),
      el("div", {"class": "instr", text: s.instruction || "(instruction not available)"})]
      .concat(s.columns ? [el("div", {"class": "cols"}, Object.keys(s.columns).map(function (k) {
        return el("span", {"class": "col", "data-col": k, text: k + ": " + s.columns[k]}); }))] : [])
      .concat((s.input_notes || []).map(function (n) { return el("div", {"class": "input-note", text: n}); }))
      .concat([el("div", {"class": "shots"}, ["source", "edited", "reference"].map(function (r) {
        return shot(s, r, function (x, role) { openInspector(x, role, currentCards); }); })), scoreTable(s)])
      .concat(itemsBlock(s, root)));
    return art;
  }

  // ------------------------------------------------------------------------------------------ cards view
  var cardsRoot = document.getElementById("cards");
  var currentCards = [];
  function value(s, key) {
    if (key === "order") { return s._i; }
    if (key === "id") { return s.id; }
    if (key === "model") { return s.model; }
    if (key === "human") { return s.human === undefined ? null : s.human; }
    var sc = s.scores[key.slice(2)];
    return sc && sc.status === "scored" ? sc.value : null;
  }
  function matches(s) {
    if (state.model && s.model !== state.model) { return false; }
    if (state.type && s.category !== state.type) { return false; }
    if (state.status === "all scored") {
      if (s.statuses.some(function (x) { return x !== "scored" && x !== "info"; })) { return false; }
    } else if (state.status && s.statuses.indexOf(state.status) < 0) { return false; }
    if (state.verdict === "unchanged") { if (!(s.unchanged && s.unchanged.length)) { return false; } }
    else if (state.verdict && s.verdicts.indexOf(state.verdict) < 0) { return false; }
    if (state.metric && (state.min !== "" || state.max !== "")) {
      var sc = s.scores[state.metric];
      if (!sc || sc.status !== "scored") { return false; }
      if (state.min !== "" && sc.value < Number(state.min)) { return false; }
      if (state.max !== "" && sc.value > Number(state.max)) { return false; }
    }
    if (state.q && s._hay.indexOf(state.q.toLowerCase()) < 0) { return false; }
    return true;
  }
  function byKey(key, dir) {
    return function (a, b) {
      var va = value(a, key), vb = value(b, key);
      if (va === null && vb === null) { return a._i - b._i; }
      if (va === null) { return 1; }   // missing values last in either direction
      if (vb === null) { return -1; }
      var c = (typeof va === "string") ? va.localeCompare(vb) : va - vb;
      return c !== 0 ? c * dir : a._i - b._i;
    };
  }
  function renderCards() {
    var shown = SAMPLES.filter(matches).sort(byKey(state.sort, state.dir === "desc" ? -1 : 1));
    currentCards = shown;
    var size = Number(state.size) || 24;
    var pages = Math.max(1, Math.ceil(shown.length / size));
    var page = Math.min(Number(state.page) || 0, pages - 1);
    state.page = String(page);
    var slice = shown.slice(page * size, (page + 1) * size);
    var frag = document.createDocumentFragment();
    slice.forEach(function (s) { frag.appendChild(card(s)); });
    cardsRoot.textContent = "";
    if (!slice.length) { cardsRoot.appendChild(el("div", {"class": "empty",
      text: SAMPLES.length ? "No edit matches these filters." : "This run has no results yet."})); }
    cardsRoot.appendChild(frag);
    document.getElementById("count").textContent = (slice.length ? "edits " + (page * size + 1) + "–" + (page * size + slice.length)
      : "no edits") + " of " + shown.length + (shown.length < SAMPLES.length ? " (filtered from " + SAMPLES.length + ")" : "");
    document.getElementById("page-info").textContent = "page " + (page + 1) + " / " + pages;
    document.getElementById("prev").disabled = page === 0;
    document.getElementById("next").disabled = page >= pages - 1;
    document.body.setAttribute("data-rendered", String(slice.length));
  }

  // ------------------------------------------------------------------------------------------ compare view
  var ROWS = [];
  (function buildRows() {
    var by = {};
    SAMPLES.forEach(function (s) {
      var g = s.group === undefined ? s._i : s.group;
      if (!by[g]) { by[g] = {g: g, first: s._i, instruction: s.instruction, category: s.category, cells: {}, src: null}; ROWS.push(by[g]); }
      var row = by[g];
      (row.cells[s.model] = row.cells[s.model] || []).push(s);
      if (!row.src && s.images.source) { row.src = s; }
      if (s.category && !row.category) { row.category = s.category; }
    });
    ROWS.forEach(function (r) {
      var g = (DATA.groups || [])[r.g] || {};
      r.hay = ((g.source || "").split("/").pop() + " " + (r.instruction || "") + " " +
               Object.keys(r.cells).map(function (m) { return r.cells[m].map(function (s) { return s.id; }).join(" "); }).join(" ")).toLowerCase();
    });
  })();
  var compareRoot = document.getElementById("compare");
  var currentCompare = [];
  function rowValue(r, ev, how) {
    if (ev === "order") { return r.first; }
    var vals = {};
    Object.keys(r.cells).forEach(function (m) {
      var v = r.cells[m].map(function (s) { var sc = s.scores[ev]; return sc && sc.status === "scored" ? sc.value : null; })
        .filter(function (x) { return x !== null; });
      if (v.length) { vals[m] = v.reduce(function (a, b) { return a + b; }, 0) / v.length; }
    });
    var ms = Object.keys(vals);
    if (!ms.length) { return null; }
    if (how.indexOf("e:") === 0) { return vals[how.slice(2)] === undefined ? null : vals[how.slice(2)]; }
    var xs = ms.map(function (m) { return vals[m]; });
    if (how === "spread") { return Math.max.apply(null, xs) - Math.min.apply(null, xs); }
    return xs.reduce(function (a, b) { return a + b; }, 0) / xs.length;
  }
  function compareCell(s, m) {
    var cap = [el("b", {text: m})];
    if (!s) {
      return el("figure", {"class": "cell absent", "data-model": m}, [el("div", {"class": "frame", text: "not edited by this editor"}),
        el("figcaption", null, cap)]);
    }
    if (state.cshow) {
      var sc = s.scores[state.cshow];
      cap.push(el("span", {"class": "val", "data-evaluator": state.cshow,
        text: sc ? (sc.status === "scored" ? fmt(sc.value) : sc.status) : "–"}));
    }
    verdictChips(s).forEach(function (c) { cap.push(c); });
    s.statuses.forEach(function (st) { if (st === "failed" || st === "unscored") { cap.push(chip(st, st)); } });
    if (s.input_notes && s.input_notes.length) { cap.push(chip("resized", "resized", s.input_notes.join("\n"))); }
    var f = frame(s, "edited", 3, function (x, role) { openInspector(x, role, currentCompareSamples()); });
    return el("figure", {"class": "cell", "data-id": s.id, "data-model": m}, [f || el("div", {"class": "frame", text: "no image"}),
      el("figcaption", null, cap)]);
  }
  function currentCompareSamples() {
    var out = [];
    currentCompare.forEach(function (r) { (DATA.models || []).forEach(function (m) { (r.cells[m] || []).forEach(function (s) { out.push(s); }); }); });
    return out;
  }
  function renderCompare() {
    var q = state.cq.toLowerCase();
    var dir = state.cdir === "desc" ? -1 : 1;
    var rows = ROWS.filter(function (r) { return (!q || r.hay.indexOf(q) >= 0) && (!state.ctype || r.category === state.ctype); });
    var keyed = rows.map(function (r) { return {r: r, v: rowValue(r, state.csort, state.cby)}; });
    keyed.sort(function (a, b) {
      if (a.v === null && b.v === null) { return a.r.first - b.r.first; }
      if (a.v === null) { return 1; }
      if (b.v === null) { return -1; }
      return (a.v - b.v) * dir || a.r.first - b.r.first;
    });
    rows = keyed.map(function (k) { return k.r; });
    currentCompare = rows;
    var size = Number(state.csize) || 12, pages = Math.max(1, Math.ceil(rows.length / size));
    var page = Math.min(Number(state.cpage) || 0, pages - 1);
    state.cpage = String(page);
    var frag = document.createDocumentFragment();
    rows.slice(page * size, (page + 1) * size).forEach(function (r) {
      var cells = [];
      if (r.src) {
        // the source is shared by the row's edits: their boxes go on each edit, not here
        var f = frame(r.src, "source", -1, function (x, role) { openInspector(x, role, currentCompareSamples()); });
        cells.push(el("figure", {"class": "cell src"}, [f, el("figcaption", {text: "source"})]));
      }
      (DATA.models || []).forEach(function (m) {
        var list = r.cells[m] || [];
        var c = compareCell(list[0], m);
        if (list.length > 1) { c.querySelector("figcaption").appendChild(el("span", {"class": "reason", text: "+" + (list.length - 1) + " more edit(s)"})); }
        cells.push(c);
      });
      frag.appendChild(el("div", {"class": "crow", "data-group": r.g}, [
        el("div", {"class": "instr", text: r.instruction || "(instruction not available)"}, r.category ? [" ", chip("cat", r.category)] : []),
        el("div", {"class": "cells", style: "--cols:" + cells.length}, cells)]));
    });
    compareRoot.textContent = "";
    if (!rows.length) { compareRoot.appendChild(el("div", {"class": "empty", text: ROWS.length ? "No source matches these filters." : "This run has no results yet."})); }
    compareRoot.appendChild(frag);
    document.getElementById("c-count").textContent = rows.length + " source(s)" + (rows.length < ROWS.length ? " (filtered from " + ROWS.length + ")" : "");
    document.getElementById("c-info").textContent = "page " + (page + 1) + " / " + pages;
    document.getElementById("c-prev").disabled = page === 0;
    document.getElementById("c-next").disabled = page >= pages - 1;
    document.body.setAttribute("data-compare-rendered", String(Math.min(size, rows.length - page * size)));
  }

  // ------------------------------------------------------------------------------------------ inspector
  var insp = null, view = {s: 1, tx: 0, ty: 0, W: 1, H: 1}, nav = [], cur = null, hl = null;
  var MODES = [["source", "source"], ["edited", "edited"], ["reference", "reference"], ["diff", "difference"], ["slider", "before | after"]];
  function fullUrl(img) {
    if (img.f && fulls()[img.f]) { return {url: fulls()[img.f], full: true}; }
    if (img.href) { return {url: img.href, full: true}; }
    return {url: thumbs()[img.t], full: false};
  }
  function buildInspector() {
    insp = el("div", {id: "inspector", hidden: "", role: "dialog", "aria-modal": "true", "aria-label": "image inspector"});
    var bar = el("div", {"class": "lb-bar"}, [
      el("div", {"class": "title"}),
      el("div", {"class": "group modes"}),
      el("div", {"class": "group gain"}, [el("label", {text: "gain "}, [el("select", {id: "lb-gain"}, [1, 4, 16].map(function (g) {
        return el("option", {value: g, text: "×" + g}); }))])]),
      el("div", {"class": "group zoom"}, [el("button", {type: "button", id: "lb-out", title: "zoom out (-)", text: "−"}),
        el("button", {type: "button", id: "lb-fit", title: "fit (0)", text: "fit"}),
        el("button", {type: "button", id: "lb-one", title: "full resolution, 1 image pixel per screen pixel (1)", text: "1:1"}),
        el("button", {type: "button", id: "lb-in", title: "zoom in (+)", text: "+"})]),
      el("div", {"class": "group"}, [el("button", {type: "button", id: "lb-prev", title: "previous edit (←)", text: "‹"}),
        el("button", {type: "button", id: "lb-next", title: "next edit (→)", text: "›"}),
        el("button", {type: "button", id: "lb-close", title: "close (Esc)", text: "✕"})])]);
    var stage = el("div", {"class": "lb-stage"});
    var vw = el("div", {"class": "lb-view"}, [stage, el("div", {"class": "lb-note"}),
      el("input", {type: "range", "class": "lb-slider", min: 0, max: 100, value: 50, "aria-label": "before | after position"})]);
    insp.appendChild(bar);
    insp.appendChild(el("div", {"class": "lb-body"}, [vw, el("div", {"class": "lb-side"})]));
    document.body.appendChild(insp);
    on("lb-close", "click", closeInspector);
    on("lb-prev", "click", function () { step(-1); });
    on("lb-next", "click", function () { step(1); });
    on("lb-fit", "click", fit);
    on("lb-one", "click", function () { zoomTo(1); });
    on("lb-in", "click", function () { zoomTo(view.s * 1.5); });
    on("lb-out", "click", function () { zoomTo(view.s / 1.5); });
    on("lb-gain", "change", applyMode);
    insp.querySelector(".lb-slider").addEventListener("input", applySlider);
    // pan with a pointer, zoom with the wheel or two fingers
    var pts = {}, start = null;
    vw.addEventListener("wheel", function (e) {
      e.preventDefault();
      var r = vw.getBoundingClientRect();
      zoomAt(view.s * Math.pow(1.0015, -e.deltaY), e.clientX - r.left, e.clientY - r.top);
    }, {passive: false});
    vw.addEventListener("pointerdown", function (e) {
      if (e.target.classList && (e.target.classList.contains("num") || e.target.classList.contains("lb-slider"))) { return; }
      pts[e.pointerId] = {x: e.clientX, y: e.clientY};
      try { vw.setPointerCapture(e.pointerId); } catch (err) { /* synthetic events */ }
      start = {tx: view.tx, ty: view.ty, s: view.s, pts: JSON.parse(JSON.stringify(pts))};
      vw.classList.add("dragging");
    });
    vw.addEventListener("pointermove", function (e) {
      if (!pts[e.pointerId] || !start) { return; }
      pts[e.pointerId] = {x: e.clientX, y: e.clientY};
      var ids = Object.keys(pts);
      if (ids.length >= 2 && start.pts[ids[0]] && start.pts[ids[1]]) {
        var d0 = Math.hypot(start.pts[ids[0]].x - start.pts[ids[1]].x, start.pts[ids[0]].y - start.pts[ids[1]].y);
        var d1 = Math.hypot(pts[ids[0]].x - pts[ids[1]].x, pts[ids[0]].y - pts[ids[1]].y);
        var r = vw.getBoundingClientRect();
        if (d0 > 0) { zoomAt(start.s * d1 / d0, (pts[ids[0]].x + pts[ids[1]].x) / 2 - r.left, (pts[ids[0]].y + pts[ids[1]].y) / 2 - r.top); }
        return;
      }
      var p0 = start.pts[e.pointerId];
      if (!p0) { return; }
      view.tx = start.tx + e.clientX - p0.x; view.ty = start.ty + e.clientY - p0.y;
      applyTransform();
    });
    function up(e) { delete pts[e.pointerId]; start = Object.keys(pts).length ? {tx: view.tx, ty: view.ty, s: view.s, pts: JSON.parse(JSON.stringify(pts))} : null;
      if (!start) { vw.classList.remove("dragging"); } }
    vw.addEventListener("pointerup", up);
    vw.addEventListener("pointercancel", up);
    vw.addEventListener("dblclick", function (e) {
      var r = vw.getBoundingClientRect();
      if (view.s < 0.99 || view.s > 1.01) { zoomAt(1, e.clientX - r.left, e.clientY - r.top); } else { fit(); }
    });
    document.addEventListener("keydown", function (e) {
      if (insp.hasAttribute("hidden")) { return; }
      if (e.key === "Escape") { closeInspector(); }
      else if (e.key === "ArrowLeft") { step(-1); } else if (e.key === "ArrowRight") { step(1); }
      else if (e.key === "+" || e.key === "=") { zoomTo(view.s * 1.5); } else if (e.key === "-") { zoomTo(view.s / 1.5); }
      else if (e.key === "0") { fit(); } else if (e.key === "1") { zoomTo(1); }
    });
    window.addEventListener("resize", function () { if (!insp.hasAttribute("hidden")) { fit(); } });
  }
  function viewEl() { return insp.querySelector(".lb-view"); }
  function stageEl() { return insp.querySelector(".lb-stage"); }
  function applyTransform() {
    var st = stageEl();
    st.style.transform = "translate(" + view.tx + "px," + view.ty + "px) scale(" + view.s + ")";
    st.style.setProperty("--s", view.s);
    st.setAttribute("data-scale", view.s.toFixed(4));
  }
  function fit() {
    var r = viewEl().getBoundingClientRect();
    var pad = 16, s = Math.min((r.width - 2 * pad) / view.W, (r.height - 2 * pad) / view.H);
    view.s = s > 0 && isFinite(s) ? s : 1;
    view.tx = (r.width - view.W * view.s) / 2; view.ty = (r.height - view.H * view.s) / 2;
    applyTransform();
  }
  function zoomAt(s, cx, cy) {
    s = Math.max(0.05, Math.min(40, s));
    view.tx = cx - (cx - view.tx) * s / view.s; view.ty = cy - (cy - view.ty) * s / view.s; view.s = s;
    applyTransform();
  }
  function zoomTo(s) { var r = viewEl().getBoundingClientRect(); zoomAt(s, r.width / 2, r.height / 2); }
  function modesOf(s) {
    var im = s.images || {}, ok = function (r) { return im[r] && !im[r].error; };
    return MODES.filter(function (m) {
      if (m[0] === "diff" || m[0] === "slider") { return ok("source") && ok("edited"); }
      return ok(m[0]);
    });
  }
  function openInspector(s, role, list) {
    if (!insp) { buildInspector(); }
    nav = list && list.length ? list : SAMPLES;
    cur = s; hl = null;
    var modes = modesOf(s);
    if (!modes.length) { return; }
    var want = state.lv && modes.some(function (m) { return m[0] === state.lv; }) ? state.lv : role;
    if (!modes.some(function (m) { return m[0] === want; })) { want = modes[0][0]; }
    state.edit = s.id; state.lv = want;
    insp.removeAttribute("hidden");
    document.body.classList.add("lb-open");
    var title = insp.querySelector(".title");
    title.textContent = "";
    title.appendChild(document.createTextNode(s.id + " · " + s.model));
    title.appendChild(el("small", {text: s.instruction || ""}));
    var mg = insp.querySelector(".modes");
    mg.textContent = "";
    modes.forEach(function (m) {
      var b = el("button", {type: "button", "data-mode": m[0], "aria-pressed": String(m[0] === want), text: m[1]});
      b.addEventListener("click", function () { state.lv = m[0]; applyMode(); writeHash(); });
      mg.appendChild(b);
    });
    var base = s.images.source && !s.images.source.error ? s.images.source : s.images.edited;
    view.W = base.w || base.tw; view.H = base.h || base.th;
    var st = stageEl();
    st.style.width = view.W + "px"; st.style.height = view.H + "px";
    st.textContent = "";
    var pair = el("div", {"class": "pair"});
    var notes = [], missingFull = [];
    ["source", "edited", "reference"].forEach(function (r) {
      var im = s.images[r];
      if (!im || im.error) { return; }
      var u = fullUrl(im);
      if (!u.full) { notes.push(r); }
      var pic = el("img", {"class": "layer-" + r, "data-role": r, src: u.url, alt: r + " image of " + s.id, draggable: "false"});
      if (u.full && im.href) {
        // a report sent without its image folder: show the thumbnail and say which file is missing
        pic.addEventListener("error", function () {
          if (pic.getAttribute("data-fallback")) { return; }
          pic.setAttribute("data-fallback", im.href);
          pic.src = thumbs()[im.t];
          missingFull.push(im.href);
          showNote();
        }, {once: true});
      }
      pair.appendChild(pic);
    });
    st.appendChild(pair);
    st.appendChild(el("div", {"class": "boxes"}));
    st.appendChild(el("div", {"class": "divider", hidden: ""}));
    function showNote() {
      var text = notes.length ? "thumbnail only: full-size images are not in this report" : "";
      if (missingFull.length) {
        text = "thumbnail only: the full-size image" + (missingFull.length > 1 ? "s " : " ") + missingFull.join(", ") +
          (missingFull.length > 1 ? " are" : " is") + " missing (send the report with its image folder, or rebuild it with --images embed)";
      }
      var n = insp.querySelector(".lb-note");
      n.textContent = text;
      n.hidden = !text;
    }
    showNote();
    insp.querySelector("#lb-prev").disabled = nav.indexOf(s) <= 0;
    insp.querySelector("#lb-next").disabled = nav.indexOf(s) < 0 || nav.indexOf(s) >= nav.length - 1;
    applyMode();
    fit();
    writeHash();
    document.body.setAttribute("data-inspector", s.id);
  }
  function applySlider() {
    var v = insp.querySelector(".lb-slider").value;
    var top = stageEl().querySelector("img.layer-edited");
    if (top) { top.style.clipPath = state.lv === "slider" ? "inset(0 0 0 " + v + "%)" : ""; }
    var d = stageEl().querySelector(".divider");
    d.style.left = v + "%";
  }
  function applyMode() {
    var s = cur, mode = state.lv, st = stageEl();
    Array.prototype.forEach.call(insp.querySelectorAll(".modes button"), function (b) { b.setAttribute("aria-pressed", String(b.getAttribute("data-mode") === mode)); });
    st.classList.toggle("diff", mode === "diff");
    st.setAttribute("data-mode", mode);
    var show = {source: mode === "source" || mode === "diff" || mode === "slider", edited: mode === "edited" || mode === "diff" || mode === "slider",
                reference: mode === "reference"};
    Array.prototype.forEach.call(st.querySelectorAll(".pair img"), function (im) {
      var r = im.getAttribute("data-role");
      im.hidden = !show[r];
      im.classList.toggle("top", r === "edited" && (mode === "diff" || mode === "slider"));
    });
    var pair = st.querySelector(".pair");
    pair.style.filter = mode === "diff" ? "brightness(" + document.getElementById("lb-gain").value + ")" : "";
    insp.querySelector(".gain").hidden = mode !== "diff";
    insp.querySelector(".lb-slider").hidden = mode !== "slider";
    st.querySelector(".divider").hidden = mode !== "slider";
    applySlider();
    // boxes: those drawn on the image in view (both images in the difference and slider views)
    var roles = mode === "diff" || mode === "slider" ? ["source", "edited"] : [mode];
    var boxes = (s.boxes || []).filter(function (b) { return layerShown(b.by) && roles.some(function (r) { return b.on.indexOf(r) >= 0; }); });
    var host = st.querySelector(".boxes");
    host.textContent = "";
    // big boxes first, so a small one inside is on top; a box is picked by its number label
    var area = function (g) { return Math.abs((g.b.box[2] - g.b.box[0]) * (g.b.box[3] - g.b.box[1])); };
    groupBoxes(boxes).sort(function (a, b) { return area(b) - area(a); }).forEach(function (g) {
      var d = boxEl(g);
      d.querySelector(".num").addEventListener("click", function (e) { e.stopPropagation(); select(g.ns[0], true); });
      d.querySelector(".num").addEventListener("pointerdown", function (e) { e.stopPropagation(); });
      host.appendChild(d);
    });
    spreadLabels(host);
    side(s, boxes);
    if (hl !== null) { select(hl, false); }
  }
  function select(n, scroll) {
    hl = n;
    Array.prototype.forEach.call(insp.querySelectorAll(".hl"), function (x) { x.classList.remove("hl"); });
    Array.prototype.forEach.call(marks(insp, n), function (x) { x.classList.add("hl"); });
    var li = insp.querySelector('.lb-side li[data-n="' + n + '"]');
    if (li && scroll) { li.scrollIntoView({block: "nearest"}); }
  }
  function side(s, boxes) {
    var sd = insp.querySelector(".lb-side");
    sd.textContent = "";
    var present = Object.keys(LAYERS).filter(function (ev) { return s.scores[ev]; });
    if (present.length) {
      sd.appendChild(el("h4", {text: "boxes"}));
      present.forEach(function (ev) {
        var ly = LAYERS[ev], n = (s.boxes || []).filter(function (b) { return b.by === ev; }).length;
        var cb = el("input", {type: "checkbox", "data-layer": ev});
        cb.checked = layerShown(ev);
        cb.addEventListener("change", function () { setLayer(ev, cb.checked); });
        sd.appendChild(el("label", {"class": "layer", "data-layer": ev}, [cb, el("i", {"class": "sw" + (ly.dashed ? " dash" : ""),
          style: "border-color:" + ly.colour}), el("b", {text: ev}), " " + ly.name + " (" + n + ")"]));
      });
      present.forEach(function (ev) {
        var mine = boxes.filter(function (b) { return b.by === ev; });
        if (!mine.length) { return; }
        sd.appendChild(el("div", {"class": "items", "data-layer": ev}, [el("b", {text: ev + ": " + LAYERS[ev].name}),
          el("ol", null, mine.map(function (b) {
            var li = itemEl(b, function () { return insp; });
            li.addEventListener("click", function () { select(b.n, false); });
            return li;
          }))]));
      });
      if (!boxes.length) { sd.appendChild(el("div", {"class": "reason", text: "no box on this image"})); }
    }
    (s.input_notes || []).forEach(function (n) { sd.appendChild(el("div", {"class": "input-note", text: n})); });
    sd.appendChild(el("h4", {text: "scores"}));
    sd.appendChild(scoreTable(s));
  }
  function step(d) {
    var i = nav.indexOf(cur);
    if (i < 0 || !nav[i + d]) { return; }
    openInspector(nav[i + d], state.lv, nav);
  }
  function closeInspector() {
    if (!insp) { return; }
    insp.setAttribute("hidden", "");
    document.body.classList.remove("lb-open");
    document.body.removeAttribute("data-inspector");
    state.edit = ""; state.lv = "";
    writeHash();
  }

  // ------------------------------------------------------------------------------------------ wiring
  function setLayer(ev, shown) {
    var h = hidden().filter(function (x) { return x !== ev; });
    if (!shown) { h.push(ev); }
    state.hide = h.join(",");
    Array.prototype.forEach.call(document.querySelectorAll('input[data-layer="' + ev + '"]'), function (c) { c.checked = shown; });
    renderAll();
    if (insp && !insp.hasAttribute("hidden")) { applyMode(); }
    writeHash();
  }
  function setView(v) {
    state.v = v;
    ["compare", "cards"].forEach(function (x) {
      document.getElementById("view-" + x).hidden = x !== v;
      document.getElementById("tab-" + x).setAttribute("aria-selected", String(x === v));
    });
  }
  function renderAll() { renderCompare(); renderCards(); }
  var CONTROLS = [["f-text", "q", "input"], ["f-model", "model"], ["f-type", "type"], ["f-status", "status"], ["f-verdict", "verdict"],
    ["f-metric", "metric"], ["f-min", "min", "input"], ["f-max", "max", "input"], ["sort", "sort"], ["page-size", "size"],
    ["c-text", "cq", "input"], ["c-type", "ctype"], ["c-sort", "csort"], ["c-by", "cby"], ["c-show", "cshow"], ["c-size", "csize"]];
  function syncControls() {
    CONTROLS.forEach(function (c) {
      var n = document.getElementById(c[0]);
      if (!n) { return; }
      if (n.tagName === "SELECT" && !Array.prototype.some.call(n.options, function (o) { return o.value === state[c[1]]; })) {
        state[c[1]] = DEF[c[1]];
      }
      n.value = state[c[1]];
    });
    var d = document.getElementById("sort-dir");
    d.textContent = state.dir === "desc" ? "descending" : "ascending"; d.setAttribute("data-dir", state.dir);
    var cd = document.getElementById("c-dir");
    cd.textContent = state.cdir === "desc" ? "descending" : "ascending"; cd.setAttribute("data-dir", state.cdir);
    Array.prototype.forEach.call(document.querySelectorAll("input[data-layer]"), function (c) { c.checked = layerShown(c.getAttribute("data-layer")); });
    var g = document.getElementById("lb-group");
    if (g) { g.value = state.lbg === "type" ? "type" : "all"; }
    applyGroup();
  }
  function applyGroup() {
    Array.prototype.forEach.call(document.querySelectorAll(".lb-scope"), function (sc) {
      var all = sc.getAttribute("data-scope") === "all";
      sc.hidden = state.lbg === "type" ? all : !all;
    });
  }
  CONTROLS.forEach(function (c) {
    on(c[0], c[2] || "change", function (e) {
      state[c[1]] = e.target.value;
      if (c[1].charAt(0) === "c") { state.cpage = "0"; renderCompare(); } else { state.page = "0"; renderCards(); }
      writeHash();
    });
  });
  on("sort-dir", "click", function () { state.dir = state.dir === "desc" ? "asc" : "desc"; syncControls(); renderCards(); writeHash(); });
  on("c-dir", "click", function () { state.cdir = state.cdir === "desc" ? "asc" : "desc"; syncControls(); renderCompare(); writeHash(); });
  on("prev", "click", function () { state.page = String(Math.max(0, Number(state.page) - 1)); renderCards(); writeHash(); });
  on("next", "click", function () { state.page = String(Number(state.page) + 1); renderCards(); writeHash(); });
  on("c-prev", "click", function () { state.cpage = String(Math.max(0, Number(state.cpage) - 1)); renderCompare(); writeHash(); });
  on("c-next", "click", function () { state.cpage = String(Number(state.cpage) + 1); renderCompare(); writeHash(); });
  on("tab-compare", "click", function () { setView("compare"); writeHash(); });
  on("tab-cards", "click", function () { setView("cards"); writeHash(); });
  on("lb-group", "change", function (e) { state.lbg = e.target.value; applyGroup(); writeHash(); });
  Array.prototype.forEach.call(document.querySelectorAll("#layers input[data-layer]"), function (c) {
    c.addEventListener("change", function () { setLayer(c.getAttribute("data-layer"), c.checked); });
  });

  function applyAddress() {
    var h = readHash();
    var anchor = h.anchor;  // an old-style link to a section: the default view, scrolled there
    if (anchor) { h = {}; }
    Object.keys(DEF).forEach(function (k) { state[k] = h[k] !== undefined ? h[k] : DEF[k]; });
    if (state.v !== "compare" && state.v !== "cards") { state.v = DEF.v; }
    syncControls();
    setView(state.v);
    renderAll();
    if (state.edit && BY_ID[state.edit]) {
      var s = BY_ID[state.edit];
      openInspector(s, state.lv || "edited", state.v === "compare" ? currentCompareSamples() : currentCards);
    } else if (insp && !insp.hasAttribute("hidden")) { closeInspector(); }
    if (anchor && document.getElementById(anchor)) { document.getElementById(anchor).scrollIntoView(); }
  }
  window.addEventListener("hashchange", applyAddress);
  applyAddress();
  document.body.setAttribute("data-ready", "1");
})();
