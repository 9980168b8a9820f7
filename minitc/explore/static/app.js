// minitc explore: the page's behaviour. Every edit sends the expression and schedule code to
// the server (debounced); the server runs it in a sandboxed process and answers JSON.
"use strict";

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 300;
const CUSTOM = "custom";
const VIEW_NAMES = { loops: "loop nest", llvm: "LLVM IR", asm: "assembly", cuda: "CUDA C" };

// The server's secret: the URL minitc explore prints ends in #token=... (or ?token=...); every
// API call sends it, and the server refuses a call without it.
function readToken() {
  const fromFragment = new URLSearchParams(window.location.hash.slice(1)).get("token");
  return fromFragment || new URLSearchParams(window.location.search).get("token") || "";
}
const TOKEN = readToken();

const state = {
  view: "loops",
  ops: {},           // op -> catalog entry
  custom: "",        // the example expression of "custom expression"
  generated: null,   // the expression code generated for the chosen op
  busy: false,       // a view request is in flight
  pending: false,    // an edit came in meanwhile
  timers: {},
};

async function api(route, body) {
  try {
    const r = await fetch("/api/" + route, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Minitc-Token": TOKEN },
      body: JSON.stringify(body),
    });
    try {
      return await r.json();
    } catch (e) {
      return { ok: false, error: { kind: "HTTP " + r.status, message: r.statusText } };
    }
  } catch (e) {
    return { ok: false, error: { kind: "NoServer", message: "the explorer server does not answer; is minitc explore still running?" } };
  }
}

function debounce(name, fn) {
  clearTimeout(state.timers[name]);
  state.timers[name] = setTimeout(fn, DEBOUNCE_MS);
}

function setStatus(text) {
  $("status").textContent = text;
}

// The request fields every job takes: the code, the target, and the op while its code is untouched.
function program() {
  const body = { expression: $("expression").value, schedule: $("schedule").value, target: $("target").value.trim() };
  if ($("op").value !== CUSTOM) {
    body.op = $("op").value;
    body.shape = $("shape").value;
    body.options = $("options").value;
  }
  return body;
}

function showError(error) {
  const box = $("error");
  box.replaceChildren();
  const kind = document.createElement("strong");
  kind.textContent = error.kind;
  box.append(kind);
  if (error.part) {
    const where = document.createElement("a");
    where.href = "#";
    where.textContent = " (" + error.part + (error.line ? ", line " + error.line : "") + ")";
    where.title = "Go to the line";
    where.addEventListener("click", (ev) => {
      ev.preventDefault();
      selectLine(error.part, error.line);
    });
    box.append(where);
  }
  box.append(": " + error.message);
  box.hidden = false;
  $("output").classList.add("stale");
  $("view-info").textContent = "";
}

function clearError() {
  $("error").hidden = true;
  $("output").classList.remove("stale");
}

function selectLine(part, line) {
  const area = $(part === "expression" ? "expression" : "schedule");
  const lines = area.value.split("\n");
  const n = Math.max(1, Math.min(line || 1, lines.length));
  const start = lines.slice(0, n - 1).reduce((acc, l) => acc + l.length + 1, 0);
  area.focus();
  area.setSelectionRange(start, start + lines[n - 1].length);
}

// -- views --------------------------------------------------------------------------------------
async function refresh() {
  if (state.busy) {
    state.pending = true;
    return;
  }
  state.busy = true;
  const view = state.view;
  setStatus("compiling " + VIEW_NAMES[view] + "…");
  const answer = await api("view", { ...program(), view });
  state.busy = false;
  if (state.pending || view !== state.view) {
    state.pending = false;
    refresh(); // the code or the tab changed meanwhile: this answer is stale
    return;
  }
  if (answer.ok) {
    clearError();
    $("output").textContent = answer.text;
    const ms = (1000 * answer.seconds).toFixed(0);
    $("view-info").textContent = answer.steps + " schedule step" + (answer.steps === 1 ? "" : "s") + ", " + ms + " ms";
    setStatus("");
  } else {
    showError(answer.error);
    setStatus("error");
  }
}

function chooseTab(view) {
  state.view = view;
  for (const b of document.querySelectorAll("#tabs button")) {
    b.classList.toggle("active", b.dataset.view === view);
  }
  refresh();
}

// -- operators ----------------------------------------------------------------------------------
async function loadOp(resetSchedule) {
  const op = $("op").value;
  setStatus("loading " + op + "…");
  const answer = await api("op", { op, shape: $("shape").value, options: $("options").value });
  if (!answer.ok) {
    showError(answer.error);
    setStatus("error");
    return;
  }
  $("expression").value = answer.expression;
  state.generated = answer.expression;
  if (resetSchedule) $("schedule").value = answer.schedule;
  codeEdited();
}

async function chooseOp() {
  const op = $("op").value;
  const custom = op === CUSTOM;
  $("shape").disabled = custom;
  $("options").disabled = custom;
  $("result").hidden = true;
  if (custom) {
    state.generated = null;
    $("syntax").textContent = "the last tensor assigned is the output";
    $("expression").value = state.custom;
    await fillSchedule("naive");
    return;
  }
  const entry = state.ops[op];
  $("shape").value = entry.shape;
  $("options").value = entry.default_options;
  $("syntax").textContent = "shape " + entry.syntax + (entry.options.length ? "; options: " + entry.options.join(", ") : "");
  await loadOp(true);
}

// The last Run's numbers belong to the code as it was: dim them once the code changes.
function codeEdited() {
  $("result").classList.add("stale");
  debounce("view", refresh);
}

function expressionEdited() {
  if ($("op").value !== CUSTOM && $("expression").value !== state.generated) {
    $("op").value = CUSTOM; // the code no longer is the op's: keep it as a custom expression
    $("shape").disabled = true;
    $("options").disabled = true;
    $("syntax").textContent = "edited: the last tensor assigned is the output";
  }
  codeEdited();
}

async function fillSchedule(kind) {
  const target = kind === "template" && state.view === "cuda" ? "cuda" : $("target").value.trim();
  setStatus("writing the " + kind + " schedule…");
  const answer = await api("schedule", { ...program(), kind, target });
  if (!answer.ok) {
    showError(answer.error);
    setStatus("error");
    return;
  }
  $("schedule").value = answer.schedule;
  codeEdited();
}

// -- run ----------------------------------------------------------------------------------------
function fmt(x, digits) {
  return x === null || x === undefined ? "-" : Number(x).toPrecision(digits || 3);
}

function row(cells, header) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement(header ? "th" : "td");
    td.textContent = c;
    tr.append(td);
  }
  return tr;
}

async function run() {
  $("run").disabled = true;
  setStatus("running: compile, check against numpy, time…");
  const answer = await api("run", program());
  $("run").disabled = false;
  if (!answer.ok) {
    showError(answer.error);
    setStatus("run failed");
    return;
  }
  setStatus("");
  const r = answer;
  const check = $("check");
  check.textContent = (r.correct.ok ? "\u2713 " : "\u2717 ") + "output " + r.correct.message;
  check.className = r.correct.ok ? "good" : "bad";
  $("times").replaceChildren(
    row(["", "median ms", r.unit, "vs numpy"], true),
    row(["minitc", fmt(r.minitc_ms), fmt(r.rate), fmt(r.speedup) + "x"]),
    row([r.numpy_label, fmt(r.numpy_ms), fmt(r.numpy_rate), "1x"]),
  );
  const fill = $("bar-fill");
  const label = $("bar-label");
  if (r.peak_fraction !== null && r.peak_fraction !== undefined) {
    const pct = 100 * r.peak_fraction;
    fill.style.width = Math.min(100, pct).toFixed(1) + "%";
    const m = r.machine || {};
    label.textContent = pct.toFixed(1) + "% of the " + r.peak_name + " (" + fmt(r.peak) + " " + r.unit + ", " +
      r.threads + " thread" + (r.threads === 1 ? "" : "s") + (m.cpu ? ", " + m.cpu : "") + ")" +
      (r.peak_note ? "; " + r.peak_note : "");
  } else {
    fill.style.width = "0";
    label.textContent = "the machine's peak is unknown";
  }
  $("result").classList.remove("stale");
  $("result").hidden = false;
}

// -- set-up -------------------------------------------------------------------------------------
function tabKey(ev) {
  if (ev.key === "Tab" && !ev.shiftKey && !ev.ctrlKey && !ev.altKey) {
    ev.preventDefault();
    ev.target.setRangeText("    ", ev.target.selectionStart, ev.target.selectionEnd, "end");
    ev.target.dispatchEvent(new Event("input"));
  } else if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
    ev.preventDefault();
    run();
  }
}

async function start() {
  const answer = await api("ops", {});
  if (!answer.ok) {
    showError(answer.error);
    return;
  }
  state.custom = answer.custom;
  const select = $("op");
  for (const entry of answer.ops) {
    state.ops[entry.op] = entry;
    const o = document.createElement("option");
    o.value = entry.op;
    o.textContent = entry.op;
    select.append(o);
  }
  const o = document.createElement("option");
  o.value = CUSTOM;
  o.textContent = "custom expression";
  select.append(o);
  select.value = "matmul";

  select.addEventListener("change", chooseOp);
  for (const id of ["shape", "options"]) $(id).addEventListener("input", () => debounce("op", () => loadOp(false)));
  $("expression").addEventListener("input", expressionEdited);
  $("schedule").addEventListener("input", codeEdited);
  $("target").addEventListener("input", codeEdited);
  for (const id of ["expression", "schedule"]) $(id).addEventListener("keydown", tabKey);
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => chooseTab(b.dataset.view));
  $("naive").addEventListener("click", () => fillSchedule("naive"));
  $("template").addEventListener("click", () => fillSchedule("template"));
  $("run").addEventListener("click", run);
  await chooseOp();
}

start();
