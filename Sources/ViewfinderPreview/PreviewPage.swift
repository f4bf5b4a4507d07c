/// The preview page: one HTML document with its style and script inline (no other asset, no
/// network beyond this server). The charts are drawn on canvases by the script itself.
///
/// The page reads its token from its own address (`/?token=T`, as the server prints it) and
/// passes it on to `/stream`, `/events` and the controls. A click on the picture posts the point
/// (normalised to the picture as shown) to `/api/point`; the metered spot the next frames report
/// is drawn as a square, the click as a ring.
enum PreviewPage {
    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Viewfinder preview</title>
<style>
  :root { color-scheme: dark; }
  body { margin: 0; font: 14px/1.35 system-ui, sans-serif; background: #111; color: #ddd; }
  header { padding: 8px 12px; background: #1c1c1c; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
  header h1 { font-size: 16px; margin: 0 12px 0 0; }
  button { background: #2d5; color: #000; border: 0; border-radius: 4px; padding: 6px 12px; font-weight: 600; cursor: pointer; }
  button.rec { background: #d33; color: #fff; }
  button:disabled { opacity: .5; }
  main { display: grid; grid-template-columns: minmax(320px, 2fr) minmax(300px, 1fr); gap: 12px; padding: 12px; }
  #view { position: relative; align-self: start; background: #000; line-height: 0; cursor: crosshair; }
  #picture { width: 100%; display: block; }
  #overlay { position: absolute; left: 0; top: 0; width: 100%; height: 100%; pointer-events: none; }
  .panel { background: #1a1a1a; border-radius: 6px; padding: 8px; margin-bottom: 10px; }
  .panel h2 { font-size: 12px; text-transform: uppercase; letter-spacing: .05em; color: #999; margin: 0 0 6px; }
  canvas.chart { width: 100%; height: 110px; display: block; }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  td { padding: 1px 4px; } td:first-child { color: #999; }
  #status, #live { color: #fb4; } .ok { color: #6d6; }
  label.switch { margin-right: 10px; white-space: nowrap; }
  .legend span { margin-right: 10px; }
</style>
</head>
<body>
<header>
  <h1>Viewfinder</h1>
  <button id="still" type="button">Still</button>
  <button id="record" type="button" class="rec">Record</button>
  <span id="stages"></span>
  <span id="live">connecting…</span>
  <span id="status"></span>
</header>
<main>
  <section>
    <div id="view"><img id="picture" alt="live picture"><canvas id="overlay"></canvas></div>
    <div class="panel"><h2>Readout</h2><table id="readout"></table></div>
  </section>
  <section>
    <div class="panel"><h2>Exposure (ms) and gain</h2><canvas class="chart" id="c-exposure"></canvas>
      <div class="legend"><span style="color:#fc4">■ exposure ms</span><span style="color:#4cf">■ gain</span></div></div>
    <div class="panel"><h2>Focus score and lens position</h2><canvas class="chart" id="c-focus"></canvas>
      <div class="legend"><span style="color:#6d6">■ focus score</span><span style="color:#c8f">■ lens position</span></div></div>
    <div class="panel"><h2>Stabiliser path x (px)</h2><canvas class="chart" id="c-path"></canvas>
      <div class="legend"><span style="color:#f66">■ raw</span><span style="color:#6cf">■ smoothed</span></div></div>
    <div class="panel"><h2>Luma histogram</h2><canvas class="chart" id="c-hist"></canvas></div>
    <div class="panel"><h2>Frame rate (fps) and preview latency (ms)</h2><canvas class="chart" id="c-fps"></canvas>
      <div class="legend"><span style="color:#6d6">■ fps</span><span style="color:#fa6">■ latency p50</span></div></div>
  </section>
</main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const q = token ? "?token=" + encodeURIComponent(token) : "";
const headers = { "Content-Type": "application/json" };
if (token) headers["Authorization"] = "Bearer " + token;
const $ = (id) => document.getElementById(id);
// State the page exposes for scripts and tests: the newest statistics message, the last tap.
window.vf = { stats: null, tap: null, messages: 0, errors: [] };

const N = 300;  // points per chart
const series = { exposure: [], gain: [], focus: [], lens: [], raw: [], smooth: [], fps: [], lat: [] };
function push(name, v) { const s = series[name]; s.push(v); if (s.length > N) s.shift(); }

function setStatus(text, ok) { const s = $("status"); s.textContent = text; s.className = ok ? "ok" : ""; }

$("picture").src = "/stream" + q;
$("picture").addEventListener("error", () => setStatus("no picture (token?)", false));

async function post(path, body) {
  const r = await fetch(path + q, { method: "POST", headers, body: JSON.stringify(body || {}) });
  const text = await r.text();
  if (!r.ok) { window.vf.errors.push(r.status + " " + text); setStatus(path + ": " + r.status + " " + text, false); throw new Error(text); }
  return JSON.parse(text);
}

$("view").addEventListener("click", async (ev) => {
  const img = $("picture").getBoundingClientRect();
  const x = (ev.clientX - img.left) / img.width, y = (ev.clientY - img.top) / img.height;
  if (x < 0 || x > 1 || y < 0 || y > 1) return;
  window.vf.tap = { x, y, t: Date.now() };
  try { await post("/api/point", { x, y }); setStatus("point " + x.toFixed(2) + ", " + y.toFixed(2), true); } catch (e) {}
});
$("still").addEventListener("click", async () => {
  try { const r = await post("/api/still"); setStatus("still " + r.file, true); } catch (e) {}
});
$("record").addEventListener("click", async () => {
  const on = !(window.vf.stats && window.vf.stats.recording);
  try { const r = await post("/api/record", { recording: on }); setStatus((on ? "recording " : "saved ") + r.file, true); } catch (e) {}
});

function renderSwitches(list) {
  const box = $("stages");
  const key = JSON.stringify(list);
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.textContent = "";
  for (const s of list) {
    const l = document.createElement("label"); l.className = "switch";
    const c = document.createElement("input"); c.type = "checkbox"; c.checked = s.enabled; c.dataset.stage = s.name;
    c.addEventListener("change", async () => { try { await post("/api/stage", { name: s.name, enabled: c.checked }); } catch (e) { c.checked = !c.checked; } });
    l.append(c, " " + s.name); box.append(l);
  }
}

function fit(canvas) {
  const r = canvas.getBoundingClientRect(), d = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(r.width * d)), h = Math.max(1, Math.round(r.height * d));
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
  const g = canvas.getContext("2d"); g.setTransform(d, 0, 0, d, 0, 0);
  return { g, w: r.width, h: r.height };
}

// Line chart of one or more series; each series is scaled to its own range (shown at the left).
function lineChart(id, lines) {
  const { g, w, h } = fit($(id));
  g.clearRect(0, 0, w, h);
  g.strokeStyle = "#333"; g.lineWidth = 1;
  for (let i = 1; i < 4; i++) { g.beginPath(); g.moveTo(0, h * i / 4); g.lineTo(w, h * i / 4); g.stroke(); }
  g.font = "10px sans-serif";
  lines.forEach((ln, k) => {
    const v = ln.data.filter((x) => x !== null && isFinite(x));
    if (v.length < 2) return;
    let lo = ln.min !== undefined ? Math.min(ln.min, ...v) : Math.min(...v), hi = Math.max(...v);
    if (ln.shared) { const a = ln.shared.filter((x) => x !== null && isFinite(x)); lo = Math.min(lo, ...a); hi = Math.max(hi, ...a); }
    if (hi - lo < 1e-9) { const pad = Math.max(Math.abs(hi) * 0.05, 1e-3); hi += pad; lo -= pad; }
    g.strokeStyle = ln.color; g.lineWidth = 1.5; g.beginPath();
    let started = false;
    ln.data.forEach((x, i) => {
      if (x === null || !isFinite(x)) { started = false; return; }
      const px = w * i / (N - 1), py = h - 4 - (h - 8) * (x - lo) / (hi - lo);
      if (!started) { g.moveTo(px, py); started = true; } else g.lineTo(px, py);
    });
    g.stroke();
    g.fillStyle = ln.color;
    g.fillText(fmt(hi), 2 + k * 70, 10); g.fillText(fmt(lo), 2 + k * 70, h - 2);
  });
}
function fmt(x) { return Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 1 ? x.toFixed(2) : x.toPrecision(3); }

function histogram(id, bins) {
  const { g, w, h } = fit($(id));
  g.clearRect(0, 0, w, h);
  if (!bins || !bins.length) return;
  const max = Math.max(1, ...bins), bw = w / bins.length;
  bins.forEach((b, i) => { const v = i * 4; g.fillStyle = "rgb(" + v + "," + v + "," + v + ")"; g.fillRect(i * bw, h - h * b / max, Math.max(1, bw - 1), h * b / max); });
  g.strokeStyle = "#555"; g.strokeRect(0.5, 0.5, w - 1, h - 1);
}

function drawOverlay(s) {
  const c = $("overlay"), { g, w, h } = fit(c);
  g.clearRect(0, 0, w, h);
  const tap = window.vf.tap;
  if (tap && Date.now() - tap.t < 3000) {
    g.strokeStyle = "rgba(255,255,255,.8)"; g.lineWidth = 2; g.beginPath(); g.arc(tap.x * w, tap.y * h, 18, 0, 2 * Math.PI); g.stroke();
  }
  if (s && s.spot) {
    const x = s.spot.x * w, y = s.spot.y * h, r = Math.max(12, w * 0.05);
    g.strokeStyle = "#fc4"; g.lineWidth = 2; g.strokeRect(x - r, y - r, 2 * r, 2 * r);
  }
}

function row(k, v) { return "<tr><td>" + k + "</td><td>" + v + "</td></tr>"; }
function n(x, d) { return x === null || x === undefined ? "–" : Number(x).toFixed(d); }
function dict(o) { const e = Object.entries(o || {}); return e.length ? e.map(([k, v]) => k + " " + v).join(", ") : "none"; }

function onStats(s) {
  window.vf.stats = s; window.vf.messages++;
  for (const p of s.samples || []) {
    push("exposure", p.exposure_us === null ? null : p.exposure_us / 1000); push("gain", p.gain);
    push("focus", p.focus_score); push("lens", p.lens);
    push("raw", p.raw_x); push("smooth", p.smooth_x);
  }
  push("fps", s.fps); push("lat", s.preview && s.preview.latency_ms ? s.preview.latency_ms.p50 : null);
  lineChart("c-exposure", [{ data: series.exposure, color: "#fc4" }, { data: series.gain, color: "#4cf" }]);
  lineChart("c-focus", [{ data: series.focus, color: "#6d6", min: 0 }, { data: series.lens, color: "#c8f" }]);
  lineChart("c-path", [{ data: series.raw, color: "#f66", shared: series.smooth }, { data: series.smooth, color: "#6cf", shared: series.raw }]);
  histogram("c-hist", s.histogram);
  lineChart("c-fps", [{ data: series.fps, color: "#6d6", min: 0 }, { data: series.lat, color: "#fa6", min: 0 }]);
  drawOverlay(s);
  renderSwitches(s.stage_switches || []);
  $("record").textContent = s.recording ? "Stop (" + s.recording + ")" : "Record";
  if (s.recording_error && s.recording_error !== window.vf.recordingError) { window.vf.recordingError = s.recording_error; setStatus(s.recording_error, false); }
  const f = s.frame || {}, p = s.preview || {};
  $("readout").innerHTML =
    row("frame", (f.width || "?") + "×" + (f.height || "?") + " " + (f.pixel_format || "") + " #" + (f.sequence || 0)) +
    row("fps", n(s.fps, 1) + " (captured " + (s.captured || 0) + ", delivered " + (s.delivered || 0) + ")") +
    row("drops", dict(s.drops)) +
    row("stages", (s.stages || []).map((x) => x.name + " " + n(x.mean_us, 0) + " µs").join(", ") || "none") +
    row("latency", "delivery p50 " + n(s.latency_ms && s.latency_ms.p50, 1) + " ms, preview p50 " + n(p.latency_ms && p.latency_ms.p50, 1) + " ms, p99 " + n(p.latency_ms && p.latency_ms.p99, 1) + " ms") +
    row("exposure", n(s.exposure_us === null ? null : s.exposure_us / 1000, 2) + " ms × gain " + n(s.gain, 2) + " (AE " + (s.ae_state || "–") + ", luma " + n(s.metered_luma, 0) + ")") +
    row("focus", "score " + n(s.focus_score, 4) + ", lens " + n(s.lens, 0) + " (AF " + (s.af_state || "–") + ")") +
    row("motion", s.motion ? n(s.motion.dx, 2) + ", " + n(s.motion.dy, 2) + " px" : "–") +
    row("spot", s.spot ? n(s.spot.x, 3) + ", " + n(s.spot.y, 3) : "whole frame") +
    row("preview", (p.viewers || 0) + " viewer(s), " + (p.pictures || 0) + " pictures, dropped " + dict(p.drops));
}

function connect() {
  const es = new EventSource("/events" + q);
  es.addEventListener("stats", (e) => { $("live").textContent = "● live"; $("live").className = "ok"; onStats(JSON.parse(e.data)); });
  es.onerror = () => { $("live").textContent = "statistics disconnected, retrying…"; $("live").className = ""; };
}
connect();
</script>
</body>
</html>
"""#
}
