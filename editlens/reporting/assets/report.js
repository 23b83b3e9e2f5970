/* editlens run report: cards with filtering, sorting and pagination. Plain JavaScript, no network. */
(function () {
  "use strict";
  var root = document.getElementById("cards");
  if (!root) { return; }  // a report without sample cards (meta-evaluation)
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var THUMBS = JSON.parse(document.getElementById("report-thumbs").textContent || "{}");
  var SAMPLES = DATA.samples || [];
  var COLORS = {ADD: "#e53935", EDIT: "#22a046", REMOVE: "#1e63d6", CHANGE: "#f5c400"};
  var ROLES = ["source", "edited", "reference"];
  var state = {model: "", status: "", verdict: "", metric: "", min: "", max: "", text: "",
               sort: "order", dir: 1, page: 0, size: 24};

  function el(tag, attrs, kids) {
    var n = document.createElement(tag);
    if (attrs) { Object.keys(attrs).forEach(function (k) {
      if (k === "text") { n.textContent = attrs[k]; } else if (attrs[k] !== null && attrs[k] !== undefined) { n.setAttribute(k, attrs[k]); }
    }); }
    (kids || []).forEach(function (c) { if (c) { n.appendChild(typeof c === "string" ? document.createTextNode(c) : c); } });
    return n;
  }
  function svgEl(tag, attrs) {
    var n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    return n;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "–"; }
    if (typeof v !== "number") { return String(v); }
    var a = Math.abs(v);
    return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : String(Number(v.toPrecision(4)));
  }
  function chip(cls, text) { return el("span", {"class": "chip " + cls, text: text}); }
  function slug(t) { return t.replace(/\s+/g, "-"); }

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
    if (state.status === "all scored") {
      if (s.statuses.some(function (x) { return x !== "scored" && x !== "info"; })) { return false; }
    } else if (state.status && s.statuses.indexOf(state.status) < 0) { return false; }
    if (state.verdict && s.verdicts.indexOf(state.verdict) < 0) { return false; }
    if (state.metric && (state.min !== "" || state.max !== "")) {
      var sc = s.scores[state.metric];
      if (!sc || sc.status !== "scored") { return false; }
      if (state.min !== "" && sc.value < Number(state.min)) { return false; }
      if (state.max !== "" && sc.value > Number(state.max)) { return false; }
    }
    if (state.text) {
      var hay = (s.id + " " + (s.instruction || "")).toLowerCase();
      if (hay.indexOf(state.text.toLowerCase()) < 0) { return false; }
    }
    return true;
  }

  function compare(a, b) {
    var va = value(a, state.sort), vb = value(b, state.sort);
    if (va === null && vb === null) { return a._i - b._i; }
    if (va === null) { return 1; }   // missing values last in either direction
    if (vb === null) { return -1; }
    var c = (typeof va === "string") ? va.localeCompare(vb) : va - vb;
    return c !== 0 ? c * state.dir : a._i - b._i;
  }

  function shot(s, role) {
    var img = s.images[role];
    if (!img) { return null; }
    var frame;
    if (img.error) {
      frame = el("div", {"class": "frame"}, [el("div", {"class": "missing", text: img.error})]);
    } else {
      var pic = el("img", {src: THUMBS[img.t], alt: role + " image of " + s.id, decoding: "async",
                           width: img.tw, height: img.th});
      var svg = svgEl("svg", {"class": "boxes", viewBox: "0 0 1 1", preserveAspectRatio: "none"});
      s.boxes.forEach(function (b) {
        if (b.on.indexOf(role) < 0) { return; }
        var x0 = Math.max(0, Math.min(b.box[0], b.box[2])), x1 = Math.min(1, Math.max(b.box[0], b.box[2]));
        var y0 = Math.max(0, Math.min(b.box[1], b.box[3])), y1 = Math.min(1, Math.max(b.box[1], b.box[3]));
        var r = svgEl("rect", {"class": "box " + b.by, x: x0, y: y0, width: x1 - x0, height: y1 - y0,
          fill: "none", stroke: COLORS[b.command] || "#ff00ff", "stroke-width": b.by === "dice" ? 2.5 : 2,
          "vector-effect": "non-scaling-stroke", "data-by": b.by, "data-command": b.command,
          "data-index": b.index, "data-box": b.box.join(",")});
        if (b.by === "change_map") { r.setAttribute("stroke-dasharray", "5 3"); }
        svg.appendChild(r);
      });
      var link = img.href ? el("a", {href: img.href, target: "_blank", rel: "noopener", title: "full-size " + role}, [pic]) : pic;
      frame = el("div", {"class": "frame"}, [link, svg]);
    }
    return el("figure", {"class": "shot", "data-role": role}, [frame, el("figcaption", {text: role})]);
  }

  function textOf(v) {  // judge texts come as a string or as {part: text} (e.g. ViEScore's SC and PQ)
    if (typeof v === "string") { return v; }
    return Object.keys(v).map(function (k) { return k + ": " + (typeof v[k] === "string" ? v[k] : JSON.stringify(v[k])); }).join("\n");
  }
  function rawBlock(label, text) {
    return el("details", null, [el("summary", {text: label}), el("pre", {text: text})]);
  }

  function scoreTable(s) {
    var rows = DATA.evaluators.filter(function (ev) { return s.scores[ev]; }).map(function (ev) {
      var sc = s.scores[ev], d = sc.details || {};
      var note = el("td", {"class": "reason"});
      if (sc.reason) { note.appendChild(document.createTextNode(sc.reason)); }
      if (ev === "change_map" && d.regions) { note.appendChild(document.createTextNode(d.regions.length + " changed region(s)")); }
      if (d.reasoning) { note.appendChild(el("div", {"class": "why", text: textOf(d.reasoning)})); }
      if (d.raw && ev !== "dice") { note.appendChild(rawBlock("raw answer", textOf(d.raw))); }
      if (ev !== "change_map" && ev !== "dice" && Object.keys(d).length && !d.raw) {
        note.appendChild(rawBlock("details", JSON.stringify(d, null, 1)));
      }
      return el("tr", {"data-evaluator": ev}, [el("td", {text: ev}), el("td", {"class": "num", text: fmt(sc.value)}),
        el("td", null, [chip(sc.status, sc.status)]), note]);
    });
    if (s.human !== undefined) {
      rows.push(el("tr", {"data-evaluator": "human"}, [el("td", {text: "human"}), el("td", {"class": "num", text: fmt(s.human)}),
        el("td"), el("td", {"class": "reason", text: "human score"})]));
    }
    return el("table", {"class": "data scores"}, [el("thead", null, [el("tr", null, [el("th", {text: "evaluator"}),
      el("th", {text: "value"}), el("th", {text: "status"}), el("th", {text: "note"})])]), el("tbody", null, rows)]);
  }

  function diceBlock(s) {
    var dice = null;  // the DICE evaluator's result, else one kept by a DICE-masked metric (as collect.dice_details)
    if (s.scores.dice && s.scores.dice.details && s.scores.dice.details.differences) { dice = s.scores.dice.details; }
    Object.keys(s.scores).forEach(function (ev) {
      var d = s.scores[ev].details;
      if (!dice && d && d.dice && d.dice.differences) { dice = d.dice; }
    });
    if (!dice) { return null; }
    var items = (dice.differences || []).map(function (d, i) {
      var v = d.verdict, verdict = null;
      if (v) {
        verdict = v.coherent === true ? chip("v-correct", "coherent") :
                  v.coherent === false ? chip("v-unwanted", "not coherent") : chip("v-unscored", "unscored");
      } else { verdict = chip("v-not-judged", "not judged"); }
      var conf = d.confidence === null || d.confidence === undefined ? "confidence n/a" : "confidence " + fmt(d.confidence);
      var li = el("li", {"data-index": i}, [el("span", {"class": "sw", style: "background:" + (COLORS[d.command] || "#f0f")}),
        el("b", {text: d.command}), " " + (d.object || "(region)") + " ", verdict,
        el("span", {"class": "reason", text: "  [" + d.box.map(function (x) { return fmt(x); }).join(", ") + "] · " + conf +
          (v && v.p_yes !== undefined ? " · P(yes) " + fmt(v.p_yes) : "")})]);
      if (v && v.reasoning) { li.appendChild(el("div", {"class": "why", text: v.reasoning})); }
      if (v && v.problem) { li.appendChild(el("div", {"class": "why", text: "unscored: " + v.problem})); }
      if (v && v.raw && (v.coherent === null || v.coherent === undefined)) { li.appendChild(rawBlock("raw answer", v.raw)); }
      return li;
    });
    var kids = [el("b", {text: "DICE differences (" + (dice.detector || "") + " detector)"})];
    if (dice.problem && !(dice.differences || []).length) {
      kids.push(el("div", {"class": "why", text: "unscored: " + dice.problem}));
    } else if (!(dice.differences || []).length) { kids.push(el("div", {"class": "why", text: "no visual change detected"})); }
    if (dice.raw) { kids.push(rawBlock("raw detection answer", dice.raw)); }
    kids.push(el("ul", {"class": "diffs"}, items));
    return el("div", {"class": "dice"}, kids);
  }

  function card(s) {
    var head = el("header", null, [el("span", {"class": "sid", text: s.id}), chip("model", s.model)]
      .concat(s.verdicts.map(function (v) { return chip("v-" + slug(v), v); })));
    return el("article", {"class": "card", "data-id": s.id, "data-model": s.model}, [head,
      el("div", {"class": "instr", text: s.instruction || "(instruction not available)"}),
      el("div", {"class": "shots"}, ROLES.map(function (r) { return shot(s, r); })),
      scoreTable(s), diceBlock(s)]);
  }

  var counter = document.getElementById("count"), pageInfo = document.getElementById("page-info");
  var prev = document.getElementById("prev"), next = document.getElementById("next");

  function render() {
    var shown = SAMPLES.filter(matches).sort(compare);
    var pages = Math.max(1, Math.ceil(shown.length / state.size));
    state.page = Math.min(state.page, pages - 1);
    var slice = shown.slice(state.page * state.size, (state.page + 1) * state.size);
    var frag = document.createDocumentFragment();
    slice.forEach(function (s) { frag.appendChild(card(s)); });
    root.textContent = "";
    if (!slice.length) { root.appendChild(el("div", {"class": "empty",
      text: SAMPLES.length ? "No edit matches these filters." : "This run has no results yet."})); }
    root.appendChild(frag);
    counter.textContent = (slice.length ? "edits " + (state.page * state.size + 1) + "–" + (state.page * state.size + slice.length)
      : "no edits") + " of " + shown.length + (shown.length < SAMPLES.length ? " (filtered from " + SAMPLES.length + ")" : "");
    pageInfo.textContent = "page " + (state.page + 1) + " / " + pages;
    prev.disabled = state.page === 0;
    next.disabled = state.page >= pages - 1;
    document.body.setAttribute("data-rendered", String(slice.length));
  }

  SAMPLES.forEach(function (s, i) { s._i = i; });
  function bind(id, key, evt) {
    var n = document.getElementById(id);
    n.addEventListener(evt || "change", function () { state[key] = n.value; state.page = 0; render(); });
  }
  bind("f-model", "model"); bind("f-status", "status"); bind("f-verdict", "verdict"); bind("f-metric", "metric");
  bind("f-min", "min", "input"); bind("f-max", "max", "input"); bind("f-text", "text", "input");
  bind("sort", "sort");
  document.getElementById("page-size").addEventListener("change", function (e) {
    state.size = Number(e.target.value); state.page = 0; render(); });
  var dirBtn = document.getElementById("sort-dir");
  dirBtn.addEventListener("click", function () {
    state.dir = -state.dir; dirBtn.textContent = state.dir > 0 ? "ascending" : "descending";
    dirBtn.setAttribute("data-dir", state.dir > 0 ? "asc" : "desc"); render(); });
  prev.addEventListener("click", function () { state.page = Math.max(0, state.page - 1); render(); });
  next.addEventListener("click", function () { state.page += 1; render(); });
  render();
})();
