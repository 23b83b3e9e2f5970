/* editlens annotate: one item at a time, keyboard first; every answer is POSTed and saved before the next */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("task-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var cur = null, choice = null, scores = {}, active = 0, busy = false, shownAt = 0;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in (attrs || {})) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fig(cls, caption, src) {
    var f = el("figure", { "class": cls });
    f.appendChild(el("figcaption", {}, caption));
    f.appendChild(el("img", { src: src, alt: caption, decoding: "async" }));
    return f;
  }
  function keyName(k) { return k === "ArrowLeft" ? "←" : k === "ArrowRight" ? "→" : k; }

  function setupRubric() {
    $("who").textContent = D.annotator;
    $("rubric-title").textContent = D.preset.title;
    var ul = $("keylist");
    var add = function (keys, what) {
      var li = el("li");
      keys.forEach(function (k, i) { if (i) li.appendChild(document.createTextNode(" / ")); li.appendChild(el("kbd", {}, keyName(k))); });
      li.appendChild(document.createTextNode(" " + what));
      ul.appendChild(li);
    };
    if (D.task === "pairwise") {
      $("rubric-text").textContent = D.preset.rubric;
      D.preset.outcomes.forEach(function (o) { add(o.keys, o.label); });
    } else {
      $("rubric-text").textContent = D.preset.criteria.map(function (c) { return c.label + ": " + c.rubric; }).join(" ");
      add(["↑", "↓"], "move between criteria");
      D.preset.criteria[0].scale.forEach(function (s) { add([s.key], "gives " + s.label + " to the highlighted criterion"); });
    }
    add(["R"], "write a reason (Esc leaves the box)");
    add(["Enter"], "save and go to the next item");
  }

  function render(state) {
    var p = state.progress;
    $("count").textContent = p.done + " of " + p.total + " done";
    $("bar").style.width = (p.total ? Math.round(100 * p.done / p.total) : 100) + "%";
    cur = state.item; choice = null; scores = {}; active = 0;
    $("reason").value = "";
    if (!cur) {
      $("item").hidden = true; $("done").hidden = false;
      document.body.setAttribute("data-done", "1");
      document.body.setAttribute("data-ready", "1");
      return;
    }
    $("item").hidden = false; $("done").hidden = true;
    $("instr").textContent = cur.instruction;
    $("turnlabel").textContent = cur.turn != null ? "Turn " + cur.turn + " · " : "";
    var h = $("history"); h.textContent = "";
    (cur.history || []).forEach(function (t) {
      var box = el("div", { "class": "hist" });
      box.appendChild(el("p", {}, "Turn " + t.turn + ": " + t.instruction));
      var g = el("div", { "class": "imgs" + (D.task === "pairwise" ? " two" : "") });
      if (D.task === "pairwise") { g.appendChild(fig("", "Left, turn " + t.turn, t.left)); g.appendChild(fig("", "Right, turn " + t.turn, t.right)); }
      else g.appendChild(fig("", "Turn " + t.turn, t.edited));
      box.appendChild(g); h.appendChild(box);
    });
    var imgs = $("imgs"); imgs.textContent = "";
    imgs.className = "imgs" + (D.task === "pairwise" ? "" : " two");
    imgs.appendChild(fig("src", "Source", cur.source));
    if (D.task === "pairwise") { imgs.appendChild(fig("", "Left", cur.left)); imgs.appendChild(fig("", "Right", cur.right)); }
    else imgs.appendChild(fig("", "Edited", cur.edited));
    renderChoices();
    shownAt = Date.now();
    document.body.setAttribute("data-position", String(cur.position));
    document.body.removeAttribute("data-done");
    document.body.setAttribute("data-ready", "1");
  }

  function renderChoices() {
    var box = $("choices"); box.textContent = "";
    if (D.task === "pairwise") {
      D.preset.outcomes.forEach(function (o) {
        var b = el("button", { type: "button", "data-value": o.value, "aria-pressed": String(choice === o.value) }, o.label);
        b.appendChild(el("small", {}, "key " + o.keys.map(keyName).join(" / ")));
        b.addEventListener("click", function () { choice = o.value; renderChoices(); });
        box.appendChild(b);
      });
    } else {
      D.preset.criteria.forEach(function (c, ci) {
        var d = el("div", { "class": "crit" + (ci === active ? " active" : ""), "data-criterion": c.name });
        d.appendChild(el("h3", {}, c.label));
        d.appendChild(el("p", {}, c.rubric));
        var s = el("div", { "class": "scale" });
        c.scale.forEach(function (v) {
          var b = el("button", { type: "button", "data-value": String(v.value), "aria-pressed": String(scores[c.name] === v.value),
                                  title: v.rubric || v.label }, v.label);
          b.appendChild(el("small", {}, "key " + v.key));
          b.addEventListener("click", function () { scores[c.name] = v.value; active = nextOpen(ci); renderChoices(); });
          s.appendChild(b);
        });
        d.appendChild(s); box.appendChild(d);
      });
    }
    $("save").disabled = !ready();
  }

  function nextOpen(from) {
    var cs = D.preset.criteria;
    for (var k = 1; k <= cs.length; k++) { var i = (from + k) % cs.length; if (!(cs[i].name in scores)) return i; }
    return from;
  }
  function ready() {
    if (!cur) return false;
    if (D.task === "pairwise") return choice !== null;
    return D.preset.criteria.every(function (c) { return c.name in scores; });
  }

  function status(text, err) { var s = $("status"); s.textContent = text; s.className = err ? "err" : ""; }

  function call(method, url, body) {
    return fetch(url, { method: method, credentials: "same-origin", cache: "no-store",
                        headers: body ? { "Content-Type": "application/json", "X-Editlens-Token": D.token }
                                      : { "X-Editlens-Token": D.token },
                        body: body ? JSON.stringify(body) : undefined })
      .then(function (r) { return r.json().then(function (j) { if (!r.ok) throw new Error(j.error || ("HTTP " + r.status)); return j; }); });
  }

  function save() {
    if (busy || !ready()) return;
    busy = true; $("save").disabled = true; status("saving…");
    var body = { position: cur.position, reason: $("reason").value, shown_ms: Date.now() - shownAt };
    if (D.task === "pairwise") body.choice = choice; else body.scores = scores;
    document.body.removeAttribute("data-ready");
    call("POST", "api/vote", body).then(function (state) {
      busy = false; status("saved"); render(state); window.scrollTo(0, 0);
    }).catch(function (e) { busy = false; status("not saved: " + e.message + " (try again)", true); $("save").disabled = !ready();
      document.body.setAttribute("data-ready", "1"); });
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var inReason = document.activeElement === $("reason");
    if (inReason) {
      if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); save(); }
      else if (ev.key === "Escape") { $("reason").blur(); }
      return;
    }
    if (!cur) return;
    if (ev.key === "Enter") { ev.preventDefault(); save(); return; }
    if (ev.key === "r" || ev.key === "R") { ev.preventDefault(); $("reason").focus(); return; }
    if (D.task === "pairwise") {
      D.preset.outcomes.forEach(function (o) { if (o.keys.indexOf(ev.key) >= 0) { ev.preventDefault(); choice = o.value; } });
      renderChoices();
      return;
    }
    var cs = D.preset.criteria;
    if (ev.key === "ArrowDown") { ev.preventDefault(); active = (active + 1) % cs.length; renderChoices(); return; }
    if (ev.key === "ArrowUp") { ev.preventDefault(); active = (active + cs.length - 1) % cs.length; renderChoices(); return; }
    cs[active].scale.forEach(function (v) {
      if (v.key === ev.key) { ev.preventDefault(); scores[cs[active].name] = v.value; active = nextOpen(active); }
    });
    renderChoices();
  });
  $("save").addEventListener("click", save);

  setupRubric();
  call("GET", "api/state").then(render).catch(function (e) { status("cannot load: " + e.message, true); });
})();
