/* jizhi dashboard: studies list, study page, trial page.
   Reads the JSON API (GET), follows Server-Sent Events for live updates, and
   sends changes (POST) with the bearer token kept in this tab's
   sessionStorage (never a cookie). Served from the binary; no CDN. */
"use strict";

const jz = (window.jz = { charts: {}, drawnAt: null, view: null });

/* ---------- small helpers ---------- */

const $ = (sel, root) => (root || document).querySelector(sel);
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function fmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(3) : x.toPrecision(5).replace(/\.?0+$/, "");
}
function when(t) {
  return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : "–";
}
/* an event's channel ("cli", "web:USER") and the authenticated user behind it */
function whoOf(e) {
  return e.actor && !String(e.who).endsWith(":" + e.actor) ? `${e.who}:${e.actor}` : e.who;
}
function stateBadge(s) { return el("span", { class: "state " + s, text: s }); }
function token() { return sessionStorage.getItem("jizhi-token") || ""; }

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  const j = await r.json();
  if (!r.ok) throw new Error(j.message || r.statusText);
  return j;
}
async function post(url, body) {
  const t0 = performance.now();
  const r = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + token() },
    body: JSON.stringify(body || {}),
  });
  const j = await r.json();
  j.http_ms = performance.now() - t0;
  if (!r.ok) throw Object.assign(new Error(j.message || r.statusText), { code: j.error });
  return j;
}

/* colour by objective: light (poor) to dark blue (good); best is red */
const RAMP = [[186, 186, 214], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
function ramp(u) {
  u = Math.max(0, Math.min(1, u));
  const x = u * (RAMP.length - 1), i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
  const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
const BEST = "#d62728";

/* The one definition of which trials count for the best (docs/design.md,
   "Best trial"; common/spec.h spec_best_counts): completed, with a finite
   value. Pruned, stopped, failed and running trials never do. */
function countsForBest(t) {
  return t.state === "completed" && typeof t.value === "number" && isFinite(t.value);
}

/* Which events mark a curve, by the rule of `jizhi plot` (cli/cmd_plot.c,
   s_mark_of): only what happened. An instruction the trial refused, that
   timed out, was withdrawn or is still pending (`applied` not true) is
   not marked. A pause --release is one mark, "release", at its stop (its
   checkpoint is not marked, and the stop is not a stop: the trial's next
   turn is the controller's `suspended`), by whoever asked for the
   checkpoint; the `retry` that starts the trial again after it is
   "resume", by the same. A trial's end as stopped or pruned is not marked
   again when an applied stop of that trial was (each stop counts once).
   `events`: a study's or a trial's, in the order stored. Returns
   [{ e, what, who }] in that order (`what`: the instruction's kind,
   "release", "resume", "stopped" or "pruned"). */
const TURNS = ["stopped", "pruned", "completed", "failed", "suspended", "retry"];
function eventMarks(events) {
  const isInstr = (e, what) => e.kind === "instruction" && (e.detail || {}).kind === what;
  const isTurn = (e) => TURNS.includes(e.kind);
  const perTrial = new Map();
  for (const e of events) {
    if (e.trial == null) continue;
    if (!perTrial.has(e.trial)) perTrial.set(e.trial, []);
    perTrial.get(e.trial).push(e);
  }
  const marks = [];
  for (const evs of perTrial.values()) {
    /* the index of the first event after (dir 1) or before (dir -1) i that pick takes, or -1 */
    const find = (i, dir, pick) => {
      for (let k = i + dir; k >= 0 && k < evs.length; k += dir) if (pick(evs[k])) return k;
      return -1;
    };
    const isReleaseStop = (i) => {
      if (!isInstr(evs[i], "stop")) return false;
      const k = find(i, 1, isTurn);
      return k >= 0 && evs[k].kind === "suspended";
    };
    const markOf = (i) => {
      const e = evs[i];
      if (e.kind === "stopped" || e.kind === "pruned") {
        for (let k = find(i, -1, isTurn) + 1; k < i; k++)
          if (isInstr(evs[k], "stop") && evs[k].applied === true) return null;
        return { e, what: e.kind, who: e.who };
      }
      let rel = -1, what = e.kind; /* rel: the release's stop, where e belongs to one */
      if (e.kind === "retry") {
        const k = find(i, -1, isTurn);
        if (k < 0 || evs[k].kind !== "suspended") return null; /* a failure's retry: the curve shows it */
        rel = find(k, -1, (x) => isInstr(x, "stop"));
        what = "resume";
      } else if (e.kind !== "instruction" || e.applied !== true) return null;
      else if (isInstr(e, "checkpoint")) {
        const k = find(i, 1, (x) => isInstr(x, "checkpoint") || isInstr(x, "stop"));
        if (k >= 0 && isReleaseStop(k)) return null; /* marked at the release's stop */
      } else if (isReleaseStop(i)) {
        rel = i;
        what = "release";
      }
      if (rel >= 0) { /* by whoever asked for the release's checkpoint */
        const k = find(rel, -1, (x) => isInstr(x, "checkpoint"));
        if (k < 0 || !isReleaseStop(rel)) return null;
        return { e, what, who: evs[k].who };
      }
      return { e, what: e.kind === "instruction" ? (e.detail || {}).kind || e.kind : what, who: e.who };
    };
    evs.forEach((e, i) => { const m = markOf(i); if (m) marks.push(m); });
  }
  return marks.sort((a, b) => a.e.id - b.e.id);
}

function trialScore(t) {
  if (typeof t.value === "number") return t.value;
  if (typeof t.last_value === "number") return t.last_value;
  return null;
}
function quantile(sorted, q) {
  if (!sorted.length) return NaN;
  const i = (sorted.length - 1) * q, lo = Math.floor(i), hi = Math.ceil(i);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
}
/* ranks with ties averaged, for Spearman's rho */
function ranks(xs) {
  const idx = xs.map((x, i) => [x, i]).sort((a, b) => a[0] - b[0]);
  const r = new Array(xs.length);
  for (let i = 0; i < idx.length; ) {
    let j = i;
    while (j + 1 < idx.length && idx[j + 1][0] === idx[i][0]) j++;
    for (let k = i; k <= j; k++) r[idx[k][1]] = (i + j) / 2;
    i = j + 1;
  }
  return r;
}
function pearson(a, b) {
  const n = a.length, ma = a.reduce((s, x) => s + x, 0) / n, mb = b.reduce((s, x) => s + x, 0) / n;
  let sab = 0, saa = 0, sbb = 0;
  for (let i = 0; i < n; i++) {
    sab += (a[i] - ma) * (b[i] - mb); saa += (a[i] - ma) ** 2; sbb += (b[i] - mb) ** 2;
  }
  return saa > 0 && sbb > 0 ? sab / Math.sqrt(saa * sbb) : 0;
}
function throttle(fn, ms) {
  let timer = null, again = false;
  return function () {
    if (timer) { again = true; return; }
    fn();
    timer = setTimeout(function tick() {
      timer = null;
      if (again) { again = false; fn(); timer = setTimeout(tick, ms); }
    }, ms);
  };
}

/* ---------- auth box ---------- */

async function refreshWho() {
  const who = $("#whoami");
  if (!token()) { who.textContent = "read-only (no token)"; return; }
  try {
    const r = await fetch("/api/whoami", { headers: { Authorization: "Bearer " + token() } });
    const j = await r.json();
    who.textContent = r.ok ? `${j.user} (${j.role})` : `token refused: ${j.message}`;
  } catch (e) { who.textContent = String(e); }
}
$("#token-save").addEventListener("click", () => {
  const v = $("#token-input").value.trim();
  if (v) sessionStorage.setItem("jizhi-token", v); else sessionStorage.removeItem("jizhi-token");
  $("#token-input").value = "";
  refreshWho();
});

/* ---------- router ---------- */

let cleanup = [];
function leave() {
  for (const f of cleanup) try { f(); } catch (e) { /* ignore */ }
  cleanup = [];
  for (const c of Object.values(jz.charts)) c.destroy();
  jz.charts = {};
  jz.drawnAt = null;
}
function route() {
  leave();
  const h = location.hash.replace(/^#/, "") || "/";
  const main = $("#main");
  main.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
  let m;
  if ((m = h.match(/^\/study\/(.+)$/))) studyPage(decodeURIComponent(m[1]));
  else if ((m = h.match(/^\/trial\/(\d+)$/))) trialPage(Number(m[1]));
  else studiesPage();
}
window.addEventListener("hashchange", route);

function crumbs(...parts) {
  const c = $("#crumbs");
  c.replaceChildren();
  parts.forEach((p, i) => {
    if (i) c.append(" / ");
    c.append(p.href ? el("a", { href: p.href, text: p.text }) : p.text);
  });
}
function fail(e) {
  $("#main").replaceChildren(el("div", { class: "panel" }, el("h2", { text: "Error" }), String(e.message || e)));
}

/* ---------- studies list ---------- */

/* A study's answer as the server judges it (docs/design.md, "Best
   trial"): the best completed trial by its id, the one `jizhi trial`
   commands take, or the size of the Pareto set. */
function bestText(s) {
  if (s.best) return `${fmt(s.best.value)} (trial ${s.best.trial})`;
  if (s.pareto && s.pareto.length) return `Pareto set: ${s.pareto.length} trial${s.pareto.length === 1 ? "" : "s"}`;
  return "–";
}

async function studiesPage() {
  jz.view = "studies";
  crumbs({ text: "studies" });
  const main = $("#main");
  const table = el("table", { id: "studies-table" });
  main.replaceChildren(el("div", { class: "panel" }, el("h1", { text: "Studies" }), table));
  async function load() {
    let j;
    try { j = await getJSON("/api/studies"); } catch (e) { return fail(e); }
    const head = el("tr", {}, ...["study", "state", "progress", "running", "failed", "pruned", "stopped", "best", "objective", "created"].map((h) => el("th", { text: h, class: ["running", "failed", "pruned", "stopped", "best"].includes(h) ? "num" : "" })));
    const rows = j.studies.map((s) => el("tr", { "data-study": s.name },
      el("td", {}, el("a", { href: "#/study/" + encodeURIComponent(s.name), text: s.name })),
      el("td", {}, stateBadge(s.state)),
      el("td", {}, el("span", { class: "bar" }, el("span", { style: `width:${Math.round(100 * s.progress)}%` })), ` ${s.done}/${s.total}`),
      el("td", { class: "num", text: s.running }),
      el("td", { class: "num", text: s.failed }),
      el("td", { class: "num", text: s.pruned || 0 }),
      el("td", { class: "num", text: s.stopped }),
      el("td", { class: "num" }, bestText(s)),
      el("td", { text: `${s.objective.metric} (${s.objective.mode})` }),
      el("td", { text: when(s.created) })));
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
    if (!rows.length) table.append(el("tr", {}, el("td", { colspan: 10, class: "muted", text: "No studies yet: jizhi study submit SPEC.json" })));
    if (jz.drawnAt === null) jz.drawnAt = performance.now();
  }
  await load();
  const timer = setInterval(load, 2000);
  cleanup.push(() => clearInterval(timer));
}

/* ---------- study page ---------- */

async function studyPage(name) {
  jz.view = "study";
  crumbs({ text: "studies", href: "#/" }, { text: name });
  let data;
  const tf = performance.now();
  /* the trials come a page at a time (docs/WEB.md): /page holds the first
     one, drawn at once; the rest are appended as they come (appendTrials) */
  const pageSize = Number(localStorage.getItem("jz.trialsPage")) || 1000;
  try { data = await getJSON(`/api/studies/${encodeURIComponent(name)}/page?points=auto&limit=${pageSize}`); } catch (e) { return fail(e); }
  jz.timing = { start: tf, data: performance.now() - tf };
  const S = {
    name, study: data.study, trials: data.trials, events: data.events, metrics: data.metrics,
    metric: data.curves.metric, curves: data.curves.trials, xcurves: {}, xaxis: "step",
    logy: false, robust: true, sort: { key: "number", dir: 1 }, filter: "",
  };
  jz.study = S;
  const maximize = S.study.objective.mode === "max";
  /* several objectives: a Pareto-front scatter, and a column per objective */
  const objectives = Array.isArray(S.study.spec.objective) ? S.study.spec.objective : [S.study.spec.objective || {}];
  const multiObjective = objectives.length > 1;
  const byId = () => Object.fromEntries(S.trials.map((t) => [t.id, t]));

  /* layout */
  const main = $("#main");
  const headline = el("div", { class: "headline", id: "study-head" });
  const stopBtn = el("button", { class: "danger", id: "study-stop", text: "Stop study" });
  const resumeBtn = el("button", { id: "study-resume", text: "Resume study" });
  const deleteBtn = el("button", { class: "danger", id: "study-delete", text: "Delete study" });
  const studyAck = el("span", { class: "small muted", id: "study-ack" });
  const metricSel = el("select", { id: "curve-metric" });
  const xSel = el("select", { id: "curve-x" });
  const logBox = el("input", { type: "checkbox", id: "curve-log" });
  const robustBox = el("input", { type: "checkbox", id: "curve-robust", checked: "" });
  const filterBox = el("input", { id: "trial-filter", placeholder: "filter: text or state" });
  const colourNote = el("span", { class: "small muted" });
  main.replaceChildren(
    el("div", { class: "panel" }, el("h1", { text: "Study " + name }), headline,
      el("div", { class: "controls" }, stopBtn, resumeBtn, deleteBtn, studyAck,
        /* the bytes of `jizhi study export` (GET .../export) */
        el("span", { class: "small muted downloads" }, "download trials: ",
          el("a", { id: "export-csv", href: `/api/studies/${encodeURIComponent(name)}/export?format=csv`, download: `${name}.csv`, text: "CSV" }), " · ",
          el("a", { id: "export-json", href: `/api/studies/${encodeURIComponent(name)}/export?format=json`, download: `${name}.json`, text: "JSON" })))),
    el("div", { class: "grid" },
      el("div", { class: "panel" }, el("h2", { text: "Optimisation history" }),
        el("div", { class: "chart-box" }, el("canvas", { id: "history-chart" })),
        el("div", { class: "note", text: "Every trial: pruned ones (stopped by early stopping) and ones a person stopped at their last value, running ones at their latest value; best so far over the completed trials." })),
      el("div", { class: "panel" }, el("h2", { text: "Learning curves" }),
        el("div", { class: "controls" },
          el("label", {}, "metric ", metricSel), el("label", {}, "x ", xSel),
          el("label", {}, logBox, " log y"), el("label", {}, robustBox, " robust y range"), colourNote),
        el("div", { class: "chart-box" }, el("canvas", { id: "curves-chart" })),
        el("div", { class: "note", id: "curves-note" })),
      ...(multiObjective ? [el("div", { class: "panel", id: "pareto-panel" }, el("h2", { text: "Pareto front" }),
        el("div", { class: "controls", id: "pareto-axes" }),
        el("div", { class: "chart-box" }, el("canvas", { id: "pareto-chart" })),
        el("div", { class: "note", id: "pareto-note" }))] : []),
      el("div", { class: "panel" }, el("h2", { text: "Parallel coordinates" }),
        el("canvas", { class: "pc", id: "parallel" }),
        el("div", { class: "note", text: "One line per trial with a value, coloured by the objective (dark = better, red = best). Constant parameters have no axis; a conditional parameter that was inactive in a trial is drawn at \u201cinactive\u201d under its axis." })),
      el("div", { class: "panel" }, el("h2", { text: "Parameter importance" }),
        el("div", { class: "chart-box short" }, el("canvas", { id: "importance-chart" })),
        el("div", { class: "note", id: "importance-note", text: "|Spearman rank correlation| between each parameter and the objective over trials with a value. A correlation, not a model-based importance: it misses interactions and non-monotone effects." })),
      el("div", { class: "panel wide" }, el("h2", { text: "Trials" }),
        el("div", { class: "controls" }, filterBox, el("span", { class: "small muted", id: "trial-count" })),
        el("div", { class: "scroll" }, el("table", { id: "trials-table" }))),
      el("div", { class: "panel wide" }, el("h2", { text: "Events" }),
        el("div", { class: "scroll" }, el("table", { id: "events-table" })))));

  function renderHead() {
    if (!$("#study-head")) return; /* the page was left */
    const s = S.study;
    stopBtn.style.display = s.state === "running" ? "" : "none";
    resumeBtn.style.display = s.state === "stopped" ? "" : "none";
    const best = s.best;
    headline.replaceChildren(
      el("span", {}, stateBadge(s.state)),
      el("span", {}, el("span", { class: "bar" }, el("span", { style: `width:${Math.round(100 * s.progress)}%` })), ` ${s.done}/${s.total} done, ${s.running} running, ${s.failed} failed, ${s.pruned || 0} pruned, ${s.stopped} stopped`),
      el("span", {}, `objective ${s.objective.metric} (${s.objective.mode})`),
      el("span", { class: "big", id: "study-best", title: best ? `the trial's number in the study: ${best.number}` : "" }, best ? `best ${fmt(best.value)} — trial ${best.trial}` : S.front && S.front.multi ? "" : "no completed trial yet"));
    if (S.front && S.front.multi)
      headline.append(el("span", { id: "study-pareto", title: "completed feasible trials no other one dominates; marked ◆ in the table" },
        `Pareto set: ${S.front.n} trial${S.front.n === 1 ? "" : "s"} ◆ (${S.front.objectives.map((o) => o.metric + " " + o.mode).join(", ")})`));
  }
  /* several objectives or constraints: the server's Pareto set (GET
     .../pareto), fetched again when the number of completed trials changes */
  S.front = null;
  let frontDone = -1;
  function loadFront() {
    const done = S.trials.filter((t) => t.state === "completed").length;
    if (done === frontDone) return;
    frontDone = done;
    getJSON(`/api/studies/${encodeURIComponent(name)}/pareto`).then((j) => {
      if (j.objectives.length < 2 && !j.constraints) return;
      S.front = { multi: j.objectives.length > 1, objectives: j.objectives, ids: new Set(j.pareto.map((p) => p.id)), n: j.pareto.length,
        trials: j.trials || [], values: Object.fromEntries((j.trials || []).map((t) => [t.id, t.values])) };
      renderHead();
      drawTable();
      drawPareto();
    }).catch(() => {});
  }
  /* the Pareto-front scatter: every completed trial by two objectives
     (chosen above the chart when there are more), the front in red */
  const paretoAxes = { x: 0, y: 1 };
  function drawPareto() {
    if (!$("#pareto-chart") || !S.front || !S.front.multi) return;
    const objs = S.front.objectives, box = $("#pareto-axes");
    if (objs.length > 2 && !box.childElementCount) {
      for (const a of ["x", "y"]) {
        const sel = el("select", { id: "pareto-" + a }, ...objs.map((o, i) => el("option", { value: String(i), text: o.metric })));
        sel.value = String(paretoAxes[a]);
        sel.addEventListener("change", () => { paretoAxes[a] = Number(sel.value); drawPareto(); });
        box.append(el("label", {}, a + " ", sel));
      }
    }
    const ox = objs[paretoAxes.x], oy = objs[paretoAxes.y];
    const sets = { front: [], dominated: [], infeasible: [] };
    let skipped = 0;
    for (const t of S.front.trials) {
      const x = t.values[ox.metric], y = t.values[oy.metric];
      if (typeof x !== "number" || typeof y !== "number") { skipped++; continue; }
      const p = { x, y, id: t.id, number: t.number };
      (t.pareto ? sets.front : t.feasible ? sets.dominated : sets.infeasible).push(p);
    }
    sets.front.sort((a, b) => a.x - b.x || a.y - b.y);
    const n = sets.front.length + sets.dominated.length + sets.infeasible.length;
    jz.pareto = { points: n, front: sets.front.length, skipped };
    $("#pareto-note").textContent = `${n} completed trials${skipped ? ` (${skipped} without a finite value of both left out)` : ""}; ` +
      `red = the Pareto set (no other completed feasible trial is as good in every objective and better in one)` +
      (objs.length > 2 ? ", judged on all objectives" : "") + ". Click a point to open its trial.";
    const ds = [
      { label: "Pareto set", data: sets.front, backgroundColor: BEST, borderColor: BEST, pointRadius: 5, showLine: true, borderDash: [4, 3], borderWidth: 1 },
      { label: "dominated", data: sets.dominated, backgroundColor: "#6baed6", pointRadius: 3.5 },
      { label: "infeasible (constraints)", data: sets.infeasible, backgroundColor: "#bbb", borderColor: "#999", pointStyle: "crossRot", pointRadius: 5, borderWidth: 1.5 },
    ].filter((d, i) => i < 2 || d.data.length);
    if (jz.charts.pareto) jz.charts.pareto.destroy();
    jz.charts.pareto = new Chart($("#pareto-chart"), {
      type: "scatter", data: { datasets: ds },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false,
        scales: { x: { title: { display: true, text: `${ox.metric} (${ox.mode})` } }, y: { title: { display: true, text: `${oy.metric} (${oy.mode})` } } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 10 } },
          tooltip: { callbacks: { label: (c) => `trial ${c.raw.id} (no. ${c.raw.number} in the study): ${ox.metric} ${fmt(c.raw.x)}, ${oy.metric} ${fmt(c.raw.y)}` } } },
        onClick: (e, items) => { const p = items[0] && ds[items[0].datasetIndex].data[items[0].index]; if (p && p.id) location.hash = "#/trial/" + p.id; },
      },
    });
  }
  function recount() {
    const s = S.study;
    if (S.loading) return; /* the server's counts hold until every page is here */
    const c = { done: 0, running: 0, failed: 0, stopped: 0, pruned: 0, completed: 0 };
    for (const t of S.trials) {
      if (t.state === "completed") c.completed++;
      if (t.state === "failed") c.failed++;
      if (t.state === "stopped") c.stopped++;
      if (t.state === "pruned") c.pruned++;
      if (["running", "starting", "paused"].includes(t.state)) c.running++;
    }
    c.done = c.completed + c.failed + c.stopped + c.pruned;
    Object.assign(s, c);
    s.progress = s.total ? c.done / s.total : 0;
    /* the one definition of best (docs/design.md): completed trials with a
       finite value; with constraints or several objectives the server's
       judgement (GET .../pareto) stands */
    if (S.front || (s.spec && s.spec.constraints) || s.pareto) {
      if (S.front && !S.front.multi) {
        const t = S.trials.find((u) => S.front.ids.has(u.id));
        s.best = t ? { trial: t.id, number: t.number, value: t.value } : null;
      }
      return;
    }
    let best = null;
    for (const t of S.trials)
      if (countsForBest(t) && (!best || (maximize ? t.value > best.value : t.value < best.value)))
        best = { trial: t.id, number: t.number, value: t.value };
    s.best = best;
  }

  /* colour scale over trial scores */
  function colours() {
    const scores = S.trials.map(trialScore).filter((v) => v !== null);
    const lo = Math.min(...scores), hi = Math.max(...scores);
    const bestId = S.study.best ? S.study.best.trial : null;
    return (t) => {
      if (t.id === bestId) return BEST;
      const v = trialScore(t);
      if (v === null || !(hi > lo)) return "rgba(120,130,150,0.6)";
      const u = (v - lo) / (hi - lo);
      return ramp(maximize ? u : 1 - u);
    };
  }

  /* optimisation history */
  function historyData() {
    const done = [], stopped = [], pruned = [], running = [], bestLine = [];
    let best = null;
    const sorted = [...S.trials].sort((a, b) => a.number - b.number);
    for (const t of sorted) {
      const v = trialScore(t);
      if (v === null) continue;
      const p = { x: t.number, y: v, id: t.id };
      if (t.state === "stopped") stopped.push(p);
      else if (t.state === "pruned") pruned.push(p);
      else if (typeof t.value === "number") done.push(p);
      else running.push(p);
      if (countsForBest(t) && (best === null || (maximize ? v > best : v < best))) best = v;
      if (best !== null) bestLine.push({ x: t.number, y: best });
    }
    return { done, stopped, pruned, running, bestLine };
  }
  function drawHistory() {
    if (!$("#history-chart")) return; /* the page was left */
    const d = historyData();
    const ds = [
      { label: "completed", data: d.done, backgroundColor: "#2171b5", pointRadius: 4, showLine: false },
      { label: "stopped by a person", data: d.stopped, borderColor: "#d9822b", backgroundColor: "#d9822b", pointStyle: "crossRot", pointRadius: 6, borderWidth: 2, showLine: false },
      { label: "pruned (early stopping)", data: d.pruned, borderColor: "#8c564b", backgroundColor: "#8c564b", pointStyle: "crossRot", pointRadius: 6, borderWidth: 2, showLine: false },
      { label: "running", data: d.running, borderColor: "#2ca25f", backgroundColor: "rgba(0,0,0,0)", pointRadius: 4, borderWidth: 1.5, showLine: false },
      { label: "best so far", type: "line", data: d.bestLine, borderColor: BEST, borderWidth: 1.5, pointRadius: 0, stepped: true, fill: false },
    ];
    if (jz.charts.history) {
      jz.charts.history.data.datasets.forEach((x, i) => (x.data = ds[i].data));
      jz.charts.history.update("none");
      return;
    }
    jz.charts.history = new Chart($("#history-chart"), {
      type: "scatter", data: { datasets: ds },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false,
        scales: { x: { title: { display: true, text: "trial's number in the study" }, ticks: { precision: 0 } }, y: { title: { display: true, text: S.study.objective.metric } } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 10 } },
          tooltip: { callbacks: { label: (c) => `trial ${c.raw.id} (no. ${c.raw.x} in the study): ${fmt(c.raw.y)}` } } },
        onClick: (e, items) => { const p = items[0] && items[0].element && ds[items[0].datasetIndex].data[items[0].index]; if (p && p.id) location.hash = "#/trial/" + p.id; },
      },
    });
  }

  /* learning curves */
  function xOf(tid, c, i) {
    if (S.xaxis === "step") return c.s[i];
    if (S.xaxis === "time") return c.t[i];
    const xc = S.xcurves[S.xaxis] && S.xcurves[S.xaxis][tid];
    if (!xc || !xc.s.length) return null;
    /* interpolate the x metric (epoch, samples) at this step */
    const s = c.s[i], xs = xc.s, ys = xc.y;
    if (s <= xs[0]) return ys[0];
    if (s >= xs[xs.length - 1]) return ys[ys.length - 1];
    let lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) { const m = (lo + hi) >> 1; if (xs[m] <= s) lo = m; else hi = m; }
    const f = (s - xs[lo]) / (xs[hi] - xs[lo] || 1);
    return ys[lo] + f * (ys[hi] - ys[lo]);
  }
  function curvePoints(tid, c) {
    const out = [];
    for (let i = 0; i < c.s.length; i++) {
      const x = xOf(tid, c, i), y = c.y[i];
      if (x === null || y === null || (S.logy && !(y > 0))) continue;
      out.push({ x, y });
    }
    return out;
  }
  function marksData() {
    /* what happened (eventMarks): changes and scheduler decisions, placed
       on their trial's curve at the point nearest in time */
    const pts = [];
    for (const { e, what: kind, who } of eventMarks(S.events)) {
      const c = S.curves[e.trial];
      if (!c || !c.s.length) continue;
      /* a trial stopped after one evaluation is a marker of its own (a cross) */
      if (c.s.length === 1 && (e.kind === "stopped" || e.kind === "pruned")) continue;
      const rel = e.time - c.t0;
      let best = 0;
      for (let i = 1; i < c.t.length; i++) if (Math.abs(c.t[i] - rel) < Math.abs(c.t[best] - rel)) best = i;
      const x = xOf(e.trial, c, best), y = c.y[best];
      if (x === null || y === null) continue;
      const d = e.detail || {};
      const what = d.name ? `${kind} ${d.name}=${fmt(d.value)}` : kind;
      pts.push({ x, y, label: `trial ${e.trial}: ${what} by ${who}${d.reason ? " — " + d.reason : ""}` });
    }
    return pts;
  }
  function yRange(sets) {
    if (!S.robust) return {};
    /* quantiles of the curves' tails (their last half), so that early
       transients do not squash the part that matters */
    const tails = [];
    /* trials with a single evaluation (pruned at the first rung) are left
       out while some trial has a curve: their early values would set the range */
    const curves = sets.some((d) => d.length > 1) ? sets.filter((d) => d.length > 1) : sets;
    for (const d of curves) for (let i = Math.floor(d.length / 2); i < d.length; i++) tails.push(d[i].y);
    if (tails.length < 4) return {};
    tails.sort((a, b) => a - b);
    let lo = quantile(tails, 0.02), hi = quantile(tails, 0.98);
    if (S.logy) { lo = Math.max(lo, 1e-300) / 1.5; hi = hi * 1.5; return { min: lo, max: hi }; }
    const pad = (hi - lo) * 0.15 || Math.abs(hi) * 0.05 || 1;
    /* data that never goes below zero gets no negative axis */
    return { min: lo >= 0 && lo - pad < 0 ? 0 : lo - pad, max: hi + pad };
  }
  /* The curves are drawn by a small Chart.js plugin straight onto the
     chart's canvas (one path per trial): Chart.js keeps the axes, the log
     scale and the markers' tooltips, and a study of 1000 trials draws in
     milliseconds instead of building 1000 datasets. */
  function curveLines() {
    const col = colours();
    const bestId = S.study.best ? S.study.best.trial : null;
    const tmap = byId();
    const lines = [];
    for (const [tid, c] of Object.entries(S.curves)) {
      const t = tmap[tid];
      if (!t) continue;
      const isBest = Number(tid) === bestId;
      lines.push({ trialId: Number(tid), number: t.number, data: curvePoints(tid, c), color: col(t),
        width: isBest ? 3 : 1, dash: t.state === "stopped" || t.state === "pruned" ? [4, 3] : [], best: isBest });
    }
    lines.sort((a, b) => a.best - b.best); /* the best on top */
    return lines;
  }
  const linesPlugin = {
    id: "jzLines",
    beforeDatasetsDraw(chart) {
      const g = chart.ctx, xs = chart.scales.x, ys = chart.scales.y, area = chart.chartArea;
      g.save();
      g.beginPath();
      g.rect(area.left, area.top, area.right - area.left, area.bottom - area.top);
      g.clip();
      for (const l of jz.curveLines || []) {
        if (l.data.length < 1) continue;
        if (l.data.length === 1) { /* one evaluation: a marker, a cross when it was stopped there */
          const px = xs.getPixelForValue(l.data[0].x), py = ys.getPixelForValue(l.data[0].y), r = l.best ? 5 : 3.5;
          g.beginPath();
          g.setLineDash([]);
          g.strokeStyle = l.color; g.fillStyle = l.color; g.lineWidth = l.best ? 2.5 : 1.5;
          if (l.dash.length) { g.moveTo(px - r, py - r); g.lineTo(px + r, py + r); g.moveTo(px - r, py + r); g.lineTo(px + r, py - r); g.stroke(); }
          else { g.arc(px, py, r, 0, 2 * Math.PI); g.fill(); }
          continue;
        }
        g.beginPath();
        g.strokeStyle = l.color;
        g.lineWidth = l.width;
        g.setLineDash(l.dash);
        l.data.forEach((p, i) => {
          const px = xs.getPixelForValue(p.x), py = ys.getPixelForValue(p.y);
          if (i) g.lineTo(px, py); else g.moveTo(px, py);
        });
        g.stroke();
      }
      g.restore();
    },
  };
  function bounds(lines, range) {
    let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
    for (const l of lines) for (const p of l.data) {
      if (p.x < xmin) xmin = p.x; if (p.x > xmax) xmax = p.x;
      if (p.y < ymin) ymin = p.y; if (p.y > ymax) ymax = p.y;
    }
    if (!(xmax >= xmin)) return {};
    if (xmax === xmin) xmax = xmin + 1;
    if (xmin > 0 && xmin < 0.1 * xmax) xmin = 0; /* start the axis at 0, not at a bucket's end */
    const y = range.min !== undefined ? range : ymax > ymin ? { min: ymin, max: ymax } : { min: ymin - 1, max: ymax + 1 };
    return { x: { min: xmin, max: xmax }, y };
  }
  function drawCurves() {
    if (!$("#curves-chart")) return; /* the page was left */
    const lines = curveLines();
    jz.curveLines = lines;
    const range = yRange(lines.map((l) => l.data));
    const b = bounds(lines, range);
    const xtitle = { step: "step", time: "seconds since the trial's first point", epoch: "epoch", samples: "samples",
      samples_bs: "samples (sum of batch_size over the steps)" }[S.xaxis];
    const single = lines.filter((l) => l.data.length === 1).length;
    jz.curvesSingle = single;
    $("#curves-note").textContent = `${lines.length} trials, ${lines.reduce((n, l) => n + l.data.length, 0)} points (downsampled); ` +
      "dark = better final objective, red = best, dashed = pruned or stopped, ▲ = changes that took effect and scheduler decisions" +
      (single ? `; ${single} trial${single === 1 ? "" : "s"} with one evaluation: ● (× when pruned or stopped there)${S.robust ? ", left out of the robust y range" : ""}` : "") +
      ". Click a curve to open its trial.";
    if (jz.charts.curves) jz.charts.curves.destroy();
    const marks = { label: "interventions", type: "scatter", data: marksData(), pointStyle: "triangle", pointRadius: 6,
      backgroundColor: "#111", borderColor: "#fff", borderWidth: 1 };
    jz.charts.curves = new Chart($("#curves-chart"), {
      type: "scatter", data: { datasets: [marks] }, plugins: [linesPlugin],
      options: {
        animation: false, maintainAspectRatio: false, parsing: false,
        scales: {
          x: { type: "linear", title: { display: true, text: xtitle }, ...(b.x || {}) },
          y: { type: S.logy ? "logarithmic" : "linear", title: { display: true, text: S.metric }, ...(b.y || {}) },
        },
        plugins: { legend: { display: false }, tooltip: { callbacks: { label: (c) => c.raw.label } } },
        onClick: (e, items, chart) => {
          /* the curve nearest to the click, within 8 pixels */
          const xs = chart.scales.x, ys = chart.scales.y;
          let best = null, bd = 64;
          for (const l of jz.curveLines) for (const p of l.data) {
            const d = (xs.getPixelForValue(p.x) - e.x) ** 2 + (ys.getPixelForValue(p.y) - e.y) ** 2;
            if (d < bd) { bd = d; best = l; }
          }
          if (best) location.hash = "#/trial/" + best.trialId;
        },
      },
    });
  }
  const redrawCurves = throttle(drawCurves, 1000);
  function fillSelectors() {
    metricSel.replaceChildren(...S.metrics.map((m) => el("option", { value: m, text: m })));
    metricSel.value = S.metric;
    const xs = ["step", "time", ...["epoch", "samples"].filter((m) => S.metrics.includes(m))];
    /* trials that report their batch size but not a sample count: the
       samples seen, summed from batch_size over the steps */
    if (!S.metrics.includes("samples") && S.metrics.includes("batch_size")) xs.push("samples_bs");
    const label = { samples_bs: "samples (Σ batch_size)", time: "time (s)" };
    xSel.replaceChildren(...xs.map((m) => el("option", { value: m, text: label[m] || m })));
    xSel.value = S.xaxis;
  }
  async function loadCurves() {
    const q = `/api/studies/${encodeURIComponent(name)}/curves?points=${data.points || 100}&metric=`;
    S.curves = (await getJSON(q + encodeURIComponent(S.metric))).trials;
    if (S.xaxis === "samples_bs" && !S.xcurves.samples_bs) {
      const bs = (await getJSON(q + "batch_size")).trials, cum = {};
      for (const [tid, c] of Object.entries(bs)) {
        const y = [];
        let total = 0, prev = -1;
        c.s.forEach((st, i) => { total += c.y[i] * (st - prev); prev = st; y.push(total); });
        cum[tid] = { s: c.s, y };
      }
      S.xcurves.samples_bs = cum;
    } else if (S.xaxis !== "step" && S.xaxis !== "time" && S.xaxis !== "samples_bs" && !S.xcurves[S.xaxis])
      S.xcurves[S.xaxis] = (await getJSON(q + encodeURIComponent(S.xaxis))).trials;
    drawCurves();
  }
  metricSel.addEventListener("change", () => { S.metric = metricSel.value; loadCurves().catch(fail); });
  xSel.addEventListener("change", () => { S.xaxis = xSel.value; loadCurves().catch(fail); });
  logBox.addEventListener("change", () => { S.logy = logBox.checked; drawCurves(); });
  robustBox.addEventListener("change", () => { S.robust = robustBox.checked; drawCurves(); });

  /* parameters */
  const space = S.study.spec.space || {};
  const pnames = Object.keys(space);
  function paramValue(t, p) { return t.params ? t.params[p] : undefined; }
  /* an inactive conditional parameter (its `when` false) has no value: it
     is drawn at its own "inactive" place under the axis */
  const conditional = (p) => !!(space[p] && space[p].when) ||
    S.trials.some((t) => t.params && Object.keys(t.params).length && paramValue(t, p) === undefined);
  function axisOf(p) {
    const sp = space[p] || {};
    const vals = S.trials.map((t) => paramValue(t, p)).filter((v) => v !== undefined);
    const cond = conditional(p);
    if (vals.length && vals.every((v) => typeof v === "number")) {
      const log = !!sp.log && vals.every((v) => v > 0);
      const f = log ? Math.log10 : (v) => v;
      let lo = Math.min(...vals.map(f)), hi = Math.max(...vals.map(f));
      if (typeof sp.low === "number" && typeof sp.high === "number" && (!log || sp.low > 0)) { lo = f(sp.low); hi = f(sp.high); }
      return { name: p + (log ? " (log)" : ""), pos: (v) => (hi > lo ? (f(v) - lo) / (hi - lo) : 0.5), lo: log ? 10 ** lo : lo, hi: log ? 10 ** hi : hi, cond };
    }
    const cats = [...new Set(vals.map(String))].sort();
    return { name: p, pos: (v) => (cats.length > 1 ? cats.indexOf(String(v)) / (cats.length - 1) : 0.5), cats, cond };
  }
  /* the axes: every tuned parameter (a const one, or a choice of one
     value, has nothing to show) and the objective */
  const pcNames = pnames.filter((p) => space[p].type !== "const" && !(Array.isArray(space[p].values) && space[p].values.length < 2));
  function drawParallel() {
    if (!$("#parallel")) return; /* the page was left */
    const cv = $("#parallel");
    const W = cv.clientWidth || 600, H = cv.clientHeight || 320, dpr = window.devicePixelRatio || 1;
    cv.width = W * dpr; cv.height = H * dpr;
    const g = cv.getContext("2d");
    g.scale(dpr, dpr);
    g.clearRect(0, 0, W, H);
    const withV = S.trials.filter((t) => trialScore(t) !== null);
    const axes = pcNames.map(axisOf);
    const scores = withV.map(trialScore);
    const vlo = Math.min(...scores), vhi = Math.max(...scores);
    axes.push({ name: S.study.objective.metric, pos: (v) => (vhi > vlo ? (v - vlo) / (vhi - vlo) : 0.5), lo: vlo, hi: vhi, objective: true });
    const anyCond = axes.some((a) => a.cond);
    const NAME = "12px system-ui, sans-serif", TICK = "11px system-ui, sans-serif";
    g.font = NAME;
    const nameW = axes.map((a) => g.measureText(a.name).width);
    g.font = TICK;
    const tickW = (a) => Math.max(0, ...(a.cats || [fmt(a.hi), fmt(a.lo)]).map((c) => g.measureText(c).width));
    /* margins that hold the first and last axis's labels */
    const left = Math.max(30, Math.min(W / 4, Math.max(nameW[0] / 2, tickW(axes[0]) / 2) + 6));
    const right = W - Math.max(30, Math.min(W / 4, Math.max(nameW[nameW.length - 1] / 2, tickW(axes[axes.length - 1]) / 2) + 6));
    const gap = axes.length > 1 ? (right - left) / (axes.length - 1) : right - left;
    /* names wider than the gap between axes go on two staggered rows */
    const stagger = nameW.some((w) => w > gap - 8);
    const top = stagger ? 58 : 44, bottom = H - (anyCond ? 44 : 26), inactiveY = H - 16;
    jz.parallel = { axes: axes.map((a) => a.name), stagger, inactive: 0 };
    const ax = (i) => (axes.length > 1 ? left + i * gap : (left + right) / 2);
    const y = (u) => bottom - u * (bottom - top);
    /* text centred on x, kept inside the canvas and at most maxW wide */
    const text = (s, x, yy, maxW) => {
      let t = s;
      while (t.length > 2 && g.measureText(t).width > maxW) t = t.slice(0, -2) + "…";
      const w = g.measureText(t).width;
      g.fillText(t, Math.min(Math.max(x, w / 2 + 2), W - w / 2 - 2), yy);
    };
    const col = colours();
    const bestId = S.study.best ? S.study.best.trial : null;
    const order = [...withV].sort((a, b) => (a.id === bestId) - (b.id === bestId));
    for (const t of order) {
      g.beginPath();
      axes.forEach((a, i) => {
        const v = a.objective ? trialScore(t) : paramValue(t, pcNames[i]);
        if (v === undefined) jz.parallel.inactive++;
        const py = v === undefined ? inactiveY : y(a.pos(v));
        if (i) g.lineTo(ax(i), py); else g.moveTo(ax(i), py);
      });
      g.strokeStyle = col(t);
      g.globalAlpha = t.id === bestId ? 1 : 0.55;
      g.lineWidth = t.id === bestId ? 2.5 : 1;
      g.stroke();
    }
    g.globalAlpha = 1;
    g.strokeStyle = "#8892a8"; g.lineWidth = 1; g.textAlign = "center";
    axes.forEach((a, i) => {
      g.beginPath(); g.moveTo(ax(i), top); g.lineTo(ax(i), bottom); g.stroke();
      g.font = NAME; g.fillStyle = "#33405e";
      text(a.name, ax(i), top - 22 - (stagger && i % 2 ? 14 : 0), stagger ? 2 * gap - 8 : Math.max(gap - 8, 40));
      g.font = TICK; g.fillStyle = "#6a7489";
      const tw = Math.max(gap - 6, 30);
      if (a.cats) a.cats.forEach((c) => text(c, ax(i), y(a.pos(c)) - 3, tw));
      else { text(fmt(a.hi), ax(i), top - 6, tw); text(fmt(a.lo), ax(i), bottom + 14, tw); }
      if (a.cond) { /* the inactive place, apart from the axis */
        g.save(); g.setLineDash([2, 3]); g.beginPath(); g.moveTo(ax(i), bottom + 18); g.lineTo(ax(i), inactiveY); g.stroke(); g.restore();
        g.beginPath(); g.arc(ax(i), inactiveY, 2.5, 0, 2 * Math.PI); g.fill();
        g.font = "italic " + TICK; text("inactive", ax(i) + (i === axes.length - 1 ? -28 : 28), inactiveY + 4, 60);
      }
    });
    if (!withV.length) { g.fillStyle = "#7a8499"; g.font = NAME; g.fillText("no trial has a value yet", W / 2, H / 2); }
  }

  /* importance: the server's (Sobol indices of a GP over the completed
     trials, as `jizhi study importance`), fetched again when the number of
     completed trials changes; |Spearman rho| until it has one */
  /* the first fetch waits a second, so it does not compete with the page's first draw */
  let imp = { done: -1, data: null, busy: false, at: Date.now() - 19000, timer: null };
  function drawImportance() {
    if (!$("#importance-chart")) return; /* the page was left */
    const done = S.trials.filter((t) => t.state === "completed").length;
    if (done !== imp.done && done >= 2 && !imp.busy) {
      /* at most every 20 s: a study of many trials costs the server a fit */
      const wait = imp.at + 20000 - Date.now();
      if (wait > 0) {
        if (!imp.timer) imp.timer = setTimeout(() => { imp.timer = null; drawImportance(); }, wait);
      } else {
        imp.busy = true;
        getJSON(`/api/studies/${encodeURIComponent(name)}/importance`)
          .then((j) => { Object.assign(imp, { done, data: j, busy: false, at: Date.now() }); jz.importance = j; drawImportance(); })
          .catch(() => Object.assign(imp, { done, data: null, busy: false, at: Date.now() }));
      }
    }
    let rows, label, axis, note;
    if (imp.data && imp.data.method === "sobol-gp") {
      rows = imp.data.params.map((p) => ({ p: p.name, v: p.importance, first: p.first, total: p.total }));
      label = "importance"; axis = "share of the objective's variance (Sobol, GP)";
      note = `First-order Sobol indices of a GP fitted to ${imp.data.trials} completed trials, normalised to sum to 1 (as jizhi study importance).`;
    } else if (imp.data) {
      /* over the model's caps the server answers with rank correlations and says why */
      rows = imp.data.params.map((p) => ({ p: p.name, v: p.importance }));
      label = "|rank correlation|"; axis = "|rank correlation| with " + S.study.objective.metric;
      note = imp.data.note || "";
    } else {
      const withV = S.trials.filter((t) => typeof t.value === "number");
      rows = [];
      for (const p of pcNames) {
        const xs = [], ys = [];
        for (const t of withV) {
          const v = paramValue(t, p);
          if (typeof v === "number") { xs.push(v); ys.push(t.value); }
        }
        if (xs.length >= 3) rows.push({ p, v: Math.abs(pearson(ranks(xs), ranks(ys))) });
      }
      rows.sort((a, b) => b.v - a.v);
      label = "|Spearman ρ|"; axis = "|rank correlation| with " + S.study.objective.metric;
      note = (rows.length ? "" : "Needs at least 3 finished trials with numeric parameters. ") +
        "|Spearman rank correlation| between each parameter and the objective, until two trials have completed (then a GP-based importance).";
    }
    $("#importance-note").textContent = note;
    const ds = { labels: rows.map((r) => r.p), datasets: [{ label, data: rows.map((r) => r.v), backgroundColor: "#3b6fd8" }] };
    if (jz.charts.importance) {
      jz.charts.importance.data = ds;
      jz.charts.importance.options.scales.x.title.text = axis;
      jz.charts.importance.update("none");
      return;
    }
    jz.charts.importance = new Chart($("#importance-chart"), {
      type: "bar", data: ds,
      options: { indexAxis: "y", animation: false, maintainAspectRatio: false,
        scales: { x: { min: 0, max: 1, title: { display: true, text: axis } } },
        plugins: { legend: { display: false } } },
    });
  }

  /* trials table */
  function drawTable() {
    if (!$("#trials-table")) return; /* the page was left */
    const cols = [
      { key: "id", label: "trial", num: true }, { key: "number", label: "no. in study", num: true },
      { key: "state", label: "state" }, { key: "value", label: S.study.objective.metric, num: true },
      ...objectives.slice(1).map((o) => ({ key: "o:" + o.metric, label: o.metric, num: true })),
      { key: "last_value", label: "last", num: true }, { key: "last_step", label: "step", num: true },
      ...pnames.map((p) => ({ key: "p:" + p, label: p, num: true })),
      { key: "generation", label: "gen", num: true }, { key: "reason", label: "why it ended" },
    ];
    const val = (t, k) => (k.startsWith("p:") ? paramValue(t, k.slice(2))
      : k.startsWith("o:") ? (S.front && S.front.values && S.front.values[t.id] || {})[k.slice(2)] : t[k]);
    const f = S.filter.toLowerCase();
    let rows = S.trials.filter((t) => !f || t.state === f || JSON.stringify([t.number, t.id, t.state, t.params, t.reason]).toLowerCase().includes(f));
    const { key, dir } = S.sort;
    /* a diverged value ("inf", "-inf", "nan" from the API) sorts as a number */
    const num = (v) => (v === "inf" ? Infinity : v === "-inf" ? -Infinity : v === "nan" ? null : v);
    rows = rows.sort((a, b) => {
      const x = num(val(a, key)), y = num(val(b, key));
      if (x == null && y == null) return 0;
      if (x == null) return 1;
      if (y == null) return -1;
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
    const bestId = S.study.best ? S.study.best.trial : null;
    const head = el("tr", {}, ...cols.map((c) => el("th", {
      class: (c.num ? "num " : "") + (c.key === key ? (dir > 0 ? "sorted-asc" : "sorted-desc") : ""), "data-key": c.key, text: c.label,
      onclick: () => { S.sort = { key: c.key, dir: S.sort.key === c.key ? -S.sort.dir : 1 }; drawTable(); },
    })));
    const limit = S.showAll ? rows.length : 300;
    const body = rows.slice(0, limit).map((t) => el("tr", { class: t.id === bestId ? "best" : "", "data-trial": t.id },
      ...cols.map((c) => {
        const v = val(t, c.key);
        if (c.key === "id") { /* the trial's id: what `jizhi trial ...` takes */
          const onFront = S.front && S.front.ids.has(t.id);
          return el("td", { class: "num" + (onFront ? " pareto" : ""), title: onFront ? (S.front.multi ? "on the Pareto set" : "best feasible") : "" },
            el("a", { href: "#/trial/" + t.id, text: String(v) + (onFront ? " ◆" : "") }));
        }
        if (c.key === "state") return el("td", {}, stateBadge(v));
        return el("td", { class: c.num ? "num" : "", text: typeof v === "number" ? fmt(v) : v == null ? "–" : String(v) });
      })));
    $("#trials-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...body));
    const count = $("#trial-count");
    count.replaceChildren(`${rows.length} of ${S.trials.length} trials`);
    if (S.trialsError) /* a page could not be read: the table lacks trials */
      count.append(el("span", { id: "trials-incomplete", text: ` (incomplete: ${S.trialsError}; reload the page)` }));
    if (rows.length > limit)
      count.append(` (first ${limit} shown) `, el("button", { id: "trials-all", text: "show all", onclick: () => { S.showAll = true; drawTable(); } }));
  }
  filterBox.addEventListener("input", () => { S.filter = filterBox.value.trim(); drawTable(); });

  /* events */
  function describe(e) {
    const d = e.detail || {};
    if (e.kind === "instruction") return `${d.kind}${d.name ? " " + d.name + "=" + fmt(d.value) : ""}${d.reason ? " — " + d.reason : ""}`;
    if (typeof d === "object" && d) return Object.entries(d).filter(([, v]) => v !== "" && v !== null).map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v).replace(/,(?=["{\[\d-])/g, ", ") : fmt(v)}`).join(" ");
    return String(d);
  }
  function drawEvents() {
    if (!$("#events-table")) return; /* the page was left */
    const head = el("tr", {}, ...["time", "trial", "who", "what", "detail", "applied", "latency"].map((h) => el("th", { text: h, class: h === "latency" ? "num" : "" })));
    const tmap = byId();
    const rows = S.events.slice(-300).reverse().map((e) => el("tr", {},
      el("td", { text: when(e.time) }),
      el("td", {}, e.trial != null ? el("a", { href: "#/trial/" + e.trial, text: String(e.trial), title: tmap[e.trial] ? `no. ${tmap[e.trial].number} in the study` : "" }) : "–"),
      el("td", { text: whoOf(e) }), el("td", { text: e.kind }), el("td", { class: "wrap", text: describe(e) }),
      el("td", { text: e.applied === null ? "–" : e.applied ? "yes" : "refused" + (e.result ? ": " + e.result : "") }),
      el("td", { class: "num", text: e.latency_s != null ? fmt(e.latency_s * 1000) + " ms" : "–" })));
    $("#events-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  }

  function drawAll() {
    /* each part's drawing time, for bench-web's breakdown */
    const t = (jz.timing = jz.timing || {});
    for (const [k, f] of [["head", renderHead], ["history", drawHistory], ["curves", drawCurves], ["parallel", drawParallel],
      ["importance", drawImportance], ["table", drawTable], ["events", drawEvents]]) {
      const t0 = performance.now();
      f();
      t[k] = performance.now() - t0;
    }
  }
  const redrawTrials = throttle(() => { recount(); renderHead(); drawHistory(); drawParallel(); drawImportance(); drawTable(); loadFront(); }, 1000);
  const redrawEvents = throttle(drawEvents, 1000);

  data.points = data.curves_points;
  fillSelectors();
  drawAll();
  loadFront();
  jz.drawnAt = performance.now();
  document.body.dataset.drawn = "study";

  /* the trials after `after`, a page at a time (GET .../trials?after=ID,
     following `next`), appended to S.trials (each id once) and redrawn per
     page; stops (true) when the page is left. A page that fails is asked
     again after 0.5, 1, 2, 4 s; then the table stays marked incomplete
     (S.trialsError; S.loading holds, so the server's counts stand) and
     it returns false. */
  async function appendTrials(after) {
    S.loading = true;
    for (let tries = 0; after != null && $("#study-head");) {
      let j;
      try { j = await getJSON(`/api/studies/${encodeURIComponent(name)}/trials?after=${after}&limit=${pageSize}`); } catch (e) {
        if (++tries > 4) {
          S.trialsError = e.message;
          document.body.dataset.trials = "incomplete";
          drawTable();
          return false;
        }
        await new Promise((ok) => setTimeout(ok, 250 * 2 ** tries));
        continue;
      }
      tries = 0;
      const have = new Set(S.trials.map((t) => t.id));
      for (const t of j.trials) if (!have.has(t.id)) S.trials.push(t);
      after = j.next;
      if (after == null) S.loading = false;
      redrawTrials();
    }
    S.loading = false;
    return true;
  }
  /* trials the stream names that are not here yet: the pages after the
     newest one known; a new one named while pages are read (needRefetch)
     is fetched when they end */
  let refetching = false, needRefetch = false;
  function fetchNew() {
    refetching = true;
    needRefetch = false;
    appendTrials(S.trials.reduce((m, t) => Math.max(m, t.id), 0)).then((ok) => {
      refetching = false;
      if (ok && needRefetch) fetchNew();
    });
  }
  S.loading = data.trials_next != null;
  document.body.dataset.trials = S.loading ? "loading" : "complete";
  if (S.loading)
    appendTrials(data.trials_next).then((ok) => {
      if (!ok) return;
      document.body.dataset.trials = "complete";
      if (needRefetch) fetchNew();
    });

  /* study buttons */
  async function studyCmd(what, btn) {
    if (!confirm(`${what} study ${name}?`)) return;
    studyAck.textContent = "…";
    try {
      const r = await post(`/api/studies/${encodeURIComponent(name)}/${what}`);
      studyAck.textContent = `${what}: acknowledged by the controller in ${fmt(r.round_trip_ms)} ms`;
    } catch (e) { studyAck.textContent = `${what}: ${e.message}`; }
  }
  stopBtn.addEventListener("click", () => studyCmd("stop"));
  resumeBtn.addEventListener("click", () => studyCmd("resume"));
  /* POST .../delete: a stopped or finished study, its owner or an admin
     (the controller says why not); logs and checkpoints stay on disk */
  deleteBtn.addEventListener("click", async () => {
    if (!confirm(`Delete study ${name}: its ${S.trials.length} trials, their metrics and events, from the database? Logs and checkpoints stay on disk. This cannot be undone.`)) return;
    studyAck.textContent = "…";
    try {
      const r = await post(`/api/studies/${encodeURIComponent(name)}/delete`);
      studyAck.textContent = `deleted: ${r.ack.trials} trials; logs left in ${(r.ack.logs || []).join(", ") || "-"}`;
      setTimeout(() => { location.hash = "#/"; }, 1500);
    } catch (e) { studyAck.textContent = `delete: ${e.message}`; }
  });

  /* live updates */
  const src = new EventSource(`/api/studies/${encodeURIComponent(name)}/stream?metric=${data.marks.metric}&event=${data.marks.event}`);
  cleanup.push(() => src.close());
  jz.live = { points: 0, events: 0, trials: 0 };
  src.addEventListener("metrics", (m) => {
    const j = JSON.parse(m.data);
    for (const [tid, pname, step, value, time] of j.points) {
      jz.live.points++;
      if (pname !== S.metric || value === null) continue;
      let c = S.curves[tid];
      if (!c) c = S.curves[tid] = { t0: time, s: [], y: [], t: [] };
      c.s.push(step); c.y.push(value); c.t.push(Math.round((time - c.t0) * 10) / 10);
      const t = S.trials.find((x) => x.id === tid);
      if (t) { t.last_value = value; t.last_step = step; }
    }
    redrawCurves();
  });
  src.addEventListener("trials", (m) => {
    const rows = JSON.parse(m.data);
    const tmap = byId();
    for (const r of rows) {
      jz.live.trials++;
      if (tmap[r.id]) Object.assign(tmap[r.id], r);
      else if (refetching || S.loading) needRefetch = true; /* a new trial: after the pages */
      else fetchNew();
    }
    redrawTrials();
  });
  src.addEventListener("events", (m) => {
    const evs = JSON.parse(m.data);
    jz.live.events += evs.length;
    S.events.push(...evs);
    redrawEvents();
    if (evs.some((e) => e.kind.startsWith("study_")))
      getJSON(`/api/studies/${encodeURIComponent(name)}`).then((j) => { delete j.spec; Object.assign(S.study, j); renderHead(); }).catch(() => {});
    /* a mark may come, or go: a release's stop is one once its suspended event is here */
    if (evs.some((e) => e.trial != null && (e.kind === "instruction" || TURNS.includes(e.kind)))) redrawCurves();
  });
  src.addEventListener("resolved", (m) => {
    const evs = JSON.parse(m.data);
    const at = new Map(S.events.map((e, i) => [e.id, i]));
    for (const e of evs) if (at.has(e.id)) S.events[at.get(e.id)] = e;
    jz.live.resolved = (jz.live.resolved || 0) + evs.length;
    redrawEvents();
    redrawCurves(); /* an applied instruction is marked, a refused one not */
  });
  const onResize = throttle(drawParallel, 200);
  window.addEventListener("resize", onResize);
  cleanup.push(() => window.removeEventListener("resize", onResize));
}

/* ---------- trial page ---------- */

async function trialPage(id) {
  jz.view = "trial";
  let T;
  try { T = await getJSON(`/api/trials/${id}`); } catch (e) { return fail(e); }
  crumbs({ text: "studies", href: "#/" }, { text: T.study, href: "#/study/" + encodeURIComponent(T.study) }, { text: `trial ${T.id}` });
  const main = $("#main");
  const info = el("div", { class: "kv", id: "trial-info" });
  const names = [...new Set([...Object.keys(T.space || {}), "lr", "batch_size", ...Object.keys(T.params || {})])];
  const setName = el("input", { id: "set-name", list: "param-names", value: names.includes("lr") ? "lr" : names[0] || "" });
  const setValue = el("input", { id: "set-value", placeholder: "value", size: 10 });
  /* a guarded change (trial set --guard) and a live fork (trial fork) */
  const setGuard = el("input", { id: "set-guard", type: "checkbox" });
  const guardSteps = el("input", { id: "guard-steps", type: "number", min: 1, value: 5, size: 4, title: "reports watched before the change is kept" });
  const forkValues = el("input", { id: "fork-values", placeholder: "lr=0.1 lr=0.4", size: 18, title: "one sibling per KEY=VALUE (several values of one sibling joined by commas)" });
  const forkSteps = el("input", { id: "fork-steps", type: "number", min: 1, value: 10, size: 4, title: "steps past the fork before the best sibling is kept" });
  const ack = el("div", { id: "ack" });
  const charts = el("div", { class: "grid", id: "trial-charts" });
  main.replaceChildren(
    el("div", { class: "panel" }, el("h1", { text: `Trial ${T.id} of ${T.study} (no. ${T.number} in the study)` }), info),
    el("div", { class: "panel" }, el("h2", { text: "Steer" }),
      el("datalist", { id: "param-names" }, ...names.map((n) => el("option", { value: n }))),
      el("div", { class: "controls" },
        el("label", {}, "set ", setName), el("label", {}, "= ", setValue),
        el("button", { id: "set-btn", text: "Set", onclick: () => steer("set") }),
        el("label", { title: "checkpoint first, watch the next reports, revert on a loss jump, NaN or a worse trend" }, setGuard, " guarded, watch ", guardSteps, " reports"),
        el("span", { class: "muted", text: " | " }),
        el("button", { id: "pause-btn", text: "Pause", onclick: () => steer("pause") }),
        el("button", { id: "release-btn", text: "Pause and release", onclick: () => steer("release") }),
        el("button", { id: "resume-btn", text: "Resume", onclick: () => steer("resume") }),
        el("button", { id: "stop-btn", class: "danger", text: "Stop", onclick: () => steer("stop") })),
      el("div", { class: "controls" },
        el("label", {}, "fork into ", forkValues), el("label", {}, " keep the best after ", forkSteps, " steps "),
        el("button", { id: "fork-btn", text: "Fork", onclick: () => steer("fork") }),
        el("button", { id: "fork-decide", text: "Decide fork now", onclick: () => steer("decide") })),
      ack,
      el("div", { class: "note", text: "Every change asks for confirmation, needs a token (top right), goes through the controller and shows the trial's acknowledgement with its latency." })),
    el("div", { class: "panel" }, el("h2", { text: "Live curves" }), charts),
    el("div", { class: "panel", id: "log-panel" }, el("h2", { text: "Log" }),
      el("div", { class: "controls" },
        el("label", {}, "stream ", el("select", { id: "log-stream" }, el("option", { value: "out", text: "stdout" }), el("option", { value: "err", text: "stderr" }))),
        el("button", { id: "log-refresh", text: "Refresh" }), el("span", { class: "small muted", id: "log-note" })),
      el("pre", { class: "log", id: "trial-log" })),
    el("div", { class: "grid" },
      el("div", { class: "panel" }, el("h2", { text: "Parameters by generation" }), el("div", { class: "scroll" }, el("table", { id: "lineage-table" }))),
      el("div", { class: "panel" }, el("h2", { text: "Events of this trial" }), el("div", { class: "scroll" }, el("table", { id: "trial-events" })))));

  function drawInfo() {
    if (!info.isConnected) return;
    const kv = [
      ["state", stateBadge(T.state)], ["value", fmt(T.value)], ["last value", fmt(T.last_value)],
      ["best value", fmt(T.best_value)], ["last step", fmt(T.last_step)], ["attempt", T.attempt],
      ["generation", T.generation], ["params", Object.entries(T.params || {}).map(([k, v]) => `${k}=${fmt(v)}`).join("  ")],
      ["dispatcher", T.dispatcher || "–"], ["started", when(T.started)], ["ended", when(T.ended)], ["why it ended", T.reason || "–"],
    ];
    info.replaceChildren(...kv.flatMap(([k, v]) => [el("div", { text: k }), el("div", {}, v)]));
  }
  function drawLineage() {
    const keys = [...new Set((T.lineage || []).flatMap((g) => Object.keys(g.params || {})))];
    const head = el("tr", {}, el("th", { text: "generation", class: "num" }), el("th", { text: "parent" }), ...keys.map((k) => el("th", { text: k, class: "num" })));
    const rows = (T.lineage || []).map((g) => el("tr", {}, el("td", { class: "num", text: g.generation }), el("td", { text: g.parent == null ? "–" : g.parent }),
      ...keys.map((k) => el("td", { class: "num", text: fmt(g.params[k]) }))));
    $("#lineage-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  }
  drawInfo(); drawLineage();

  /* the latest attempt's stdout or stderr, its last 64 KiB (GET .../log),
     read again every 5 s while the trial runs */
  async function loadLog() {
    const pre = $("#trial-log");
    if (!pre) return;
    const stream = $("#log-stream").value;
    try {
      const j = await getJSON(`/api/trials/${id}/log?stream=${stream}&tail=65536`);
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = j.data || "";
      if (atEnd) pre.scrollTop = pre.scrollHeight;
      $("#log-note").textContent = !j.data ? `no ${stream === "out" ? "stdout" : "stderr"} output yet (attempt ${j.attempt + 1})`
        : `attempt ${j.attempt + 1}` + (j.from > 0 ? `, its last ${fmt(j.size - j.from)} of ${fmt(j.size)} bytes` : "") +
          (j.source === "dispatcher" ? `, read through dispatcher ${T.dispatcher}` : "") + "; jizhi trial logs " + id + " prints it all";
    } catch (e) { $("#log-note").textContent = "log: " + e.message; }
  }
  $("#log-stream").addEventListener("change", loadLog);
  $("#log-refresh").addEventListener("click", loadLog);
  loadLog();
  const logTimer = setInterval(() => { if (["running", "starting", "paused"].includes(T.state)) loadLog(); }, 5000);
  cleanup.push(() => clearInterval(logTimer));

  let series = {};
  try { series = (await getJSON(`/api/trials/${id}/metrics?points=1000`)).metrics; } catch (e) { return fail(e); }
  const charted = Object.keys(series).sort((a, b) => (a === T.objective.metric ? -1 : b === T.objective.metric ? 1 : a.localeCompare(b)));
  /* the trial's interventions as dashed vertical lines at their step */
  jz.trialMarks = [];
  const marksPlugin = {
    id: "jzTrialMarks",
    afterDatasetsDraw(chart) {
      const g = chart.ctx, xs = chart.scales.x, area = chart.chartArea;
      g.save();
      g.strokeStyle = "#d62728"; g.fillStyle = "#d62728"; g.setLineDash([4, 3]); g.lineWidth = 1;
      g.font = "11px system-ui, sans-serif";
      /* labels that would overlap (a pause and its resume a few steps
         apart) go on the next row down */
      g.fillStyle = "rgba(214, 39, 40, 0.08)";
      for (const b of jz.trialBands) {
        const x0 = Math.max(xs.getPixelForValue(b.from), area.left), x1 = Math.min(xs.getPixelForValue(b.to), area.right);
        if (x1 > x0) g.fillRect(x0, area.top, x1 - x0, area.bottom - area.top);
      }
      g.fillStyle = "#d62728";
      const rows = [];
      const placed = [];
      for (const mk of [...jz.trialMarks].sort((a, b) => a.step - b.step)) {
        const px = xs.getPixelForValue(mk.step);
        if (!(px >= area.left && px <= area.right)) continue;
        g.beginPath(); g.moveTo(px, area.top); g.lineTo(px, area.bottom); g.stroke();
        const w = g.measureText(mk.label).width;
        const lx = Math.min(px + 3, area.right - w - 2);
        let row = rows.findIndex((end) => lx > end + 4);
        if (row < 0) { row = rows.length; rows.push(0); }
        rows[row] = lx + w;
        g.fillText(mk.label, lx, area.top + 11 + 12 * row);
        placed.push({ label: mk.label, x: lx, w, row });
      }
      chart.jzLabels = placed;
      g.restore();
    },
  };
  function markOf(e, what, step) {
    const d = e.detail || {};
    if (e.kind === "guarded_change") return { step, label: `guard: ${d.guard || "watching"}` };
    if (e.kind === "fork_started") return { step: d.fork_step != null ? d.fork_step : step, label: "fork" };
    if (e.kind === "fork_decided") return { step, label: `fork decided: ${d.decision && d.decision.best != null ? "trial " + d.decision.best : "none"}` };
    return { step, label: d.name ? `${d.name}=${fmt(d.value)}` : what };
  }
  /* the watch window of a decided guarded change: from the change to its last report */
  jz.trialBands = [];
  function bandOf(e) {
    const ev = (e.detail || {}).evidence || {};
    const steps = (ev.window || []).map((p) => p[0]);
    if (e.kind !== "guarded_change" || ev.apply_step == null || !steps.length) return null;
    return { from: ev.apply_step, to: Math.max(...steps), label: e.detail.guard, id: e.id };
  }
  /* the marks and bands, made again from all the trial's events: a mark
     comes or goes as they settle (eventMarks: an instruction once applied,
     a release once the trial is suspended) */
  function remark() {
    events.sort((a, b) => a.id - b.id);
    const guards = events.filter((e) => ["guarded_change", "fork_started", "fork_decided"].includes(e.kind) &&
      !(e.kind === "guarded_change" && !e.applied)); /* a guarded change's start: marked when decided */
    jz.trialMarks = [];
    jz.trialBands = [];
    for (const { e, what } of [...eventMarks(events), ...guards.map((e) => ({ e, what: e.kind }))]) {
      const b = bandOf(e);
      if (b) jz.trialBands.push(b);
      const st = b ? b.to : stepAt(e.time);
      if (st !== null) jz.trialMarks.push({ ...markOf(e, what, st), id: e.id });
    }
  }
  function stepAt(time) {
    /* the step reported nearest in time to an event */
    const c = series[T.objective.metric] || Object.values(series)[0];
    if (!c || !c.s.length) return null;
    const rel = time - (T.started || 0);
    let best = 0;
    for (let i = 1; i < c.t.length; i++) if (Math.abs(c.t[i] - rel) < Math.abs(c.t[best] - rel)) best = i;
    return c.s[best];
  }
  function chartFor(m) {
    const c = series[m];
    const box = el("div", { class: "chart-box short" }, el("canvas", { id: "metric-" + m }));
    charts.append(el("div", {}, el("h2", { text: m }), box));
    jz.charts["m:" + m] = new Chart(box.firstChild, {
      type: "line",
      data: { datasets: [{ label: m, data: c.s.map((s, i) => ({ x: s, y: c.y[i] })), borderColor: m === T.objective.metric ? "#2171b5" : "#555", borderWidth: 1.5, pointRadius: 0 }] },
      plugins: [marksPlugin],
      options: { animation: false, maintainAspectRatio: false, parsing: false, normalized: true,
        scales: { x: { type: "linear", title: { display: true, text: "step" } } }, plugins: { legend: { display: false } } },
    });
  }
  charted.forEach(chartFor);
  if (!charted.length) charts.append(el("p", { class: "muted", text: "No metrics reported yet." }));
  jz.drawnAt = performance.now();
  document.body.dataset.drawn = "trial";

  let events = [];
  function drawTrialEvents() {
    if (!$("#trial-events")) return;
    const head = el("tr", {}, ...["time", "who", "what", "applied", "latency"].map((h) => el("th", { text: h })));
    const rows = events.slice(-200).reverse().map((e) => {
      const d = e.detail || {};
      return el("tr", {}, el("td", { text: when(e.time) }), el("td", { text: whoOf(e) }),
        el("td", { text: e.kind === "instruction" ? `${d.kind}${d.name ? " " + d.name + "=" + fmt(d.value) : ""}`
          : e.kind === "guarded_change" ? `guarded change ${d.guard || "started"}${d.reason ? ": " + d.reason : ""}`
          : e.kind === "fork_decided" || e.kind === "fork_started" ? `${e.kind.replace("_", " ")}${d.reason ? ": " + d.reason : ""}` : e.kind }),
        el("td", { text: e.applied === null ? "–" : e.applied ? "yes" : "refused" + (e.result ? ": " + e.result : "") }),
        el("td", { class: "num", text: e.latency_s != null ? fmt(e.latency_s * 1000) + " ms" : "–" }));
    });
    $("#trial-events").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  }
  try {
    events = (await getJSON(`/api/studies/${encodeURIComponent(T.study)}/events?limit=100000`)).events.filter((e) => e.trial === id);
  } catch (e) { /* the page still works without them */ }
  remark();
  for (const m of Object.keys(series)) if (jz.charts["m:" + m]) jz.charts["m:" + m].update("none");
  drawTrialEvents();

  /* why value v of parameter n lies outside the study's space, or "" */
  function outsideSpace(n, v) {
    const p = (T.space || {})[n];
    if (!p) return "";
    const vals = Array.isArray(p.values) ? p.values : p.type === "const" ? [p.value] : null;
    if (vals && !vals.some((x) => x === v || String(x) === String(v)))
      return `${n}=${v} is not one of the space's values (${JSON.stringify(vals)})`;
    if (typeof v === "number" && typeof p.low === "number" && (v < p.low || v > p.high))
      return `${n}=${v} is outside the space (${p.low} to ${p.high}${p.log ? ", log scale" : ""})`;
    if (typeof v === "number" && typeof p.step === "number" && p.step > 0) {
      const k = (v - p.low) / p.step;
      if (Math.abs(k - Math.round(k)) > 1e-9 * Math.max(1, Math.abs(k)))
        return `${n}=${v} is off the space's grid (${p.low} to ${p.high} in steps of ${p.step})`;
    }
    return "";
  }
  async function steer(what) {
    let body = {}, path = what, text = what;
    if (what === "set") {
      const n = setName.value.trim(), raw = setValue.value.trim();
      if (!n || !raw) { ack.className = "err"; ack.textContent = "set: give a parameter name and a value"; return; }
      const num = Number(raw);
      body = { values: { [n]: raw !== "" && Number.isFinite(num) ? num : raw } };
      text = `set ${n}=${raw}`;
      if (setGuard.checked) { body.guard = { mode: "checkpoint", watch_steps: Number(guardSteps.value) || 5 }; text = `guarded ${text}`; }
    } else if (what === "release") { path = "pause"; body = { release: true }; text = "pause and release"; }
    else if (what === "fork" || what === "decide") {
      path = "fork";
      if (what === "decide") { body = { decide: true }; text = "decide the fork"; }
      else {
        const sibs = [];
        for (const arg of forkValues.value.trim().split(/\s+/).filter(Boolean)) {
          const v = {};
          for (const kv of arg.split(",")) {
            const i = kv.indexOf("=");
            if (i < 1) { ack.className = "err"; ack.textContent = `fork: expected KEY=VALUE, got "${kv}"`; return; }
            const raw = kv.slice(i + 1), num = Number(raw);
            v[kv.slice(0, i)] = raw !== "" && Number.isFinite(num) ? num : raw;
          }
          sibs.push(v);
        }
        if (!sibs.length) { ack.className = "err"; ack.textContent = "fork: give KEY=VALUE for each sibling"; return; }
        body = { siblings: sibs, steps: Number(forkSteps.value) || 10 };
        text = `fork into ${forkValues.value.trim()}`;
        const outs = sibs.flatMap((v) => Object.entries(v).map(([n, x]) => outsideSpace(n, x))).filter(Boolean);
        if (outs.length) {
          if (!confirm(`${outs.join("\n")}\n\n${text} on trial ${T.id} anyway?`)) { ack.className = ""; ack.textContent = `${text}: not sent`; return; }
          body.force = true;
        }
      }
    }
    if (!token()) { ack.className = "err"; ack.textContent = "enter a token (top right) to steer trials"; return; }
    const outside = what === "set" ? outsideSpace(...Object.entries(body.values)[0]) : "";
    if (body.force && what === "fork") { /* confirmed above */ }
    else if (outside) {
      /* the controller refuses it without "force": the CLI's --force, confirmed */
      if (!confirm(`${outside}\n\n${text} on trial ${T.id} anyway?`)) { ack.className = ""; ack.textContent = `${text}: not sent`; return; }
      body.force = true;
    } else if (!confirm(`${text} on trial ${T.id}?`)) return;
    ack.className = "";
    ack.textContent = what === "release" ? `${text}: sent, waiting for the trial to checkpoint and exit…`
      : body.guard ? `${text}: sent, watching the next ${body.guard.watch_steps} reports…` : `${text}: sent…`;
    try {
      let r;
      try {
        r = await post(`/api/trials/${id}/${path}`, body);
      } catch (e) {
        /* outside the space: the same confirmation as the CLI's --force */
        if (e.code !== "out_of_space" || !confirm(`${e.message}\n\nSend ${text.slice(4)} to trial ${T.id} anyway?`)) throw e;
        ack.textContent = `${text} (outside the space): sent…`;
        r = await post(`/api/trials/${id}/${path}`, { ...body, force: true });
      }
      const a = r.ack || {};
      ack.className = "ok";
      if (a.guard) ack.className = a.guard === "kept" ? "ok" : "err";
      ack.textContent = a.guard ? `${text}: ${a.guard} — ${a.reason || ""}`
        : a.fork === "decided" ? `${text}: ${a.reason} (siblings ${(a.siblings || []).join(", ")})`
        : a.fork === "running" ? `${text}: forked from step ${a.fork_step} into trials ${(a.siblings || []).join(", ")}; the best continues after ${a.steps} steps${a.waiting ? " (waiting for a slot: " + a.waiting + ")" : ""}`
        : a.fork ? `${text}: the trial checkpoints first; its siblings start from that checkpoint`
        : a.latency_s != null
        ? `${text}: acknowledged by the trial in ${fmt(a.latency_s * 1000)} ms (round trip ${fmt(r.round_trip_ms)} ms)`
        : a.released ? `${text}: released — checkpoint at step ${a.checkpoint_step} saved, the trial exited and freed its slot (answered in ${fmt(r.round_trip_ms)} ms); Resume restarts it from the checkpoint`
        : a.releasing ? `${text}: releasing (checkpoint, then exit) — controller answered in ${fmt(r.round_trip_ms)} ms`
        : a.restarting ? `${text}: restarting from its checkpoint — controller answered in ${fmt(r.round_trip_ms)} ms`
        : `${text}: accepted by the controller in ${fmt(r.round_trip_ms)} ms`;
    } catch (e) { ack.className = "err"; ack.textContent = `${text}: ${e.message}`; }
    /* the change's event now says whether it was applied, and how fast */
    try {
      events = (await getJSON(`/api/studies/${encodeURIComponent(T.study)}/events?limit=100000`)).events.filter((e) => e.trial === id);
      remark(); /* a guarded change's outcome, a fork */
      redraw();
      drawTrialEvents();
    } catch (e) { /* the stream brings the rest */ }
  }

  const redraw = throttle(() => { for (const m of Object.keys(series)) if (jz.charts["m:" + m]) jz.charts["m:" + m].update("none"); }, 500);
  const src = new EventSource(`/api/studies/${encodeURIComponent(T.study)}/stream?trial=${id}&metric=${T.marks.metric}&event=${T.marks.event}`);
  cleanup.push(() => src.close());
  src.addEventListener("metrics", (m) => {
    for (const [tid, name, step, value, time] of JSON.parse(m.data).points) {
      if (tid !== id) continue;
      if (!series[name]) { series[name] = { s: [], y: [], t: [] }; chartFor(name); }
      const c = series[name];
      c.s.push(step); c.y.push(value); c.t.push(time - (T.started || 0));
      jz.charts["m:" + name].data.datasets[0].data.push({ x: step, y: value });
      T.last_step = step;
      if (name === T.objective.metric) T.last_value = value;
    }
    redraw();
  });
  src.addEventListener("trials", (m) => {
    for (const r of JSON.parse(m.data)) if (r.id === id) Object.assign(T, r);
    drawInfo();
  });
  src.addEventListener("resolved", (m) => {
    for (const e of JSON.parse(m.data)) {
      const i = events.findIndex((x) => x.id === e.id);
      if (i >= 0) events[i] = e;
    }
    remark();
    redraw();
    drawTrialEvents();
  });
  src.addEventListener("events", async (m) => {
    const evs = JSON.parse(m.data).filter((e) => e.trial === id);
    if (!evs.length) return;
    /* steer()'s own read may hold some already (a waited release answers late) */
    events.push(...evs.filter((e) => !events.some((x) => x.id === e.id)));
    remark();
    redraw();
    drawTrialEvents();
    try { const j = await getJSON(`/api/trials/${id}`); T.params = j.params; T.generation = j.generation; T.lineage = j.lineage; drawInfo(); drawLineage(); } catch (e) { /* next time */ }
  });
}

refreshWho();
route();
