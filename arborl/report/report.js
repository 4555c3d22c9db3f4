// arborl report: draws the charts (Plotly, inlined above) and the episode browser from
// the JSON in #report-data. No network: everything the page needs is in the file.
"use strict";
const D = JSON.parse(document.getElementById("report-data").textContent);
const PAGE = D.page_size, MAX_PAIRS = 4;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : (+x).toFixed(d));

function drawCharts() {
  const root = document.getElementById("charts"), sections = {};
  for (const c of D.charts) {
    if (!sections[c.section]) {
      sections[c.section] = el("div", { class: "grid" });
      root.append(el("h2", { id: "sec-" + c.section }, c.section), sections[c.section]);
      document.getElementById("nav").append(el("a", { href: "#sec-" + c.section }, c.section));
    }
    const div = el("div", { class: "chart", id: "chart-" + c.id, "data-series": c.traces.length });
    sections[c.section].append(div);
    const layout = {
      title: { text: c.title, font: { size: 13 } },
      margin: { l: 50, r: 10, t: 36, b: 30 }, height: 300,
      xaxis: { title: { text: "step", standoff: 2 } }, yaxis: { title: { text: c.ytitle } },
      legend: { font: { size: 10 }, orientation: "h", y: -0.25 }, showlegend: true,
    };
    Plotly.newPlot(div, c.traces, layout, { displayModeBar: false, responsive: true });
  }
}

// An agent's call: its last message, and what the model saw (every message) on a click.
function obsCell(s) {
  const obs = el("pre", {}, s.obs);
  if (!s.seen) return obs;
  return el("div", {}, obs, el("details", { class: "seen" },
    el("summary", {}, "what the model saw"), el("pre", {}, s.seen)));
}

function turnsTable(ep) {
  const t = el("table", { class: "turns" },
    el("tr", {}, el("th", {}, "#"), el("th", {}, "observation"), el("th", {}, "generated"),
      el("th", {}, "action"), el("th", {}, "reward"), el("th", {}, "valid")));
  ep.turns.forEach((s, i) => t.append(el("tr", { class: s.valid ? "" : "invalid" },
    el("td", {}, i + 1), el("td", {}, obsCell(s)), el("td", {}, el("pre", {}, s.response)),
    el("td", {}, el("code", {}, s.action)), el("td", {}, fmt(s.reward, 2)),
    el("td", {}, s.valid ? "yes" : "NO"))));
  return t;
}

function episodeView(ep, open) {
  const head = `${ep.run} · ${ep.source} step ${ep.step} · task ${ep.task} · ` +
    `${ep.won ? "WON" : "lost"} · return ${fmt(ep.return, 2)} · ${ep.turns.length} turns`;
  const d = el("details", { class: "episode " + (ep.won ? "won" : "lost"), "data-task": ep.task },
    el("summary", {}, head));
  if (ep.instruction) d.append(el("p", { class: "instr" }, ep.instruction));
  d.append(turnsTable(ep));
  if (open) d.open = true;
  return d;
}

const state = { page: 0 };
function filtered() {
  const o = document.getElementById("f-outcome").value, t = document.getElementById("f-task").value;
  const p = document.getElementById("f-point").value;
  return D.episodes.filter(e => (o === "all" || (o === "won") === e.won) &&
    (t === "all" || e.task === t) && (p === "all" || `${e.run}|${e.source}|${e.step}` === p));
}

function drawEpisodes() {
  const eps = filtered(), box = document.getElementById("episode-list");
  const pages = Math.max(1, Math.ceil(eps.length / PAGE));
  state.page = Math.min(state.page, pages - 1);
  box.replaceChildren(...eps.slice(state.page * PAGE, (state.page + 1) * PAGE).map(e => episodeView(e, false)));
  document.getElementById("episode-count").textContent =
    `${eps.length} of ${D.episodes.length} episodes · page ${state.page + 1}/${pages}`;
  const t = document.getElementById("f-task").value;
  const all = D.pairs.filter(p => t === "all" || p.task === t), pairs = all.slice(0, MAX_PAIRS);
  document.getElementById("pair-count").textContent = all.length > pairs.length ?
    `${pairs.length} of ${all.length} tasks shown; pick a task above to see its pair` : "";
  document.getElementById("pair-list").replaceChildren(...pairs.map(p => el("div", { class: "pair" },
    el("div", {}, el("h4", {}, `before RL (step ${D.episodes[p.before].step})`), episodeView(D.episodes[p.before], true)),
    el("div", {}, el("h4", {}, `after RL (step ${D.episodes[p.after].step})`), episodeView(D.episodes[p.after], true)))));
}

function setupFilters() {
  const task = document.getElementById("f-task"), point = document.getElementById("f-point");
  for (const t of [...new Set(D.episodes.map(e => e.task))].sort()) task.append(el("option", { value: t }, t));
  for (const k of [...new Set(D.episodes.map(e => `${e.run}|${e.source}|${e.step}`))]) {
    const [run, src, step] = k.split("|");
    point.append(el("option", { value: k }, `${run}: ${src} step ${step}`));
  }
  for (const id of ["f-outcome", "f-task", "f-point"])
    document.getElementById(id).addEventListener("change", () => { state.page = 0; drawEpisodes(); });
  document.getElementById("prev").addEventListener("click", () => { state.page = Math.max(0, state.page - 1); drawEpisodes(); });
  document.getElementById("next").addEventListener("click", () => { state.page += 1; drawEpisodes(); });
}

function drawTrees() {
  const box = document.getElementById("trees");
  if (!box) return;  // a run without trees has no section (and no nav link)
  for (const t of D.trees) {
    // A trees/*.html page is any file in the run folder: sandboxed, its scripts run with an
    // opaque origin and cannot reach this page (an srcdoc frame would inherit ours).
    const f = el("iframe", { class: "tree", title: t.name, sandbox: "allow-scripts" });
    f.srcdoc = t.html;
    box.append(el("h4", {}, `${t.run}: ${t.name}`), f);
  }
}

drawCharts();
for (const [id, text] of [["episodes", "Episodes"], ["trees-h", "Search trees"], ["config-h", "Config"]])
  if (document.getElementById(id)) document.getElementById("nav").append(el("a", { href: "#" + id }, text));
setupFilters();
drawEpisodes();
drawTrees();
document.body.setAttribute("data-ready", "1");
