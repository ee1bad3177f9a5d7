// The streamplane console: a small single-page app over the coordinator's /api, live through /api/live.
// No build step and no dependency: pages are strings of escaped HTML, charts are inline SVG.

const page = document.getElementById("page");
const state = { me: null, live: null, liveGroup: null, route: [], data: null, tail: true };

const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "—");
const secs = (ms) => `${(ms / 1000).toFixed(1)} s`;
const badge = (s) => `<span class="badge ${esc(s)}">${esc(s)}</span>`;
const table = (heads, rows) =>
  `<table><tr>${heads.map((h) => `<th>${esc(h)}</th>`).join("")}</tr>${rows.join("") || `<tr><td colspan="${heads.length}" class="muted">(none)</td></tr>`}</table>`;

async function api(path, body) {
  const init = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const res = await fetch(`/api/${path}`, { credentials: "same-origin", ...init });
  const data = await res.json();
  if (res.status === 401) { signIn(data.message); throw new Error(data.message); }
  if (!res.ok) throw new Error(data.message || res.statusText);
  return data;
}

function signIn(message) {
  page.innerHTML = `<h2>Sign in</h2><p class="muted">${esc(message)}</p>
    <form id="login"><input id="token" type="password" placeholder="token" size="60"> <button>Sign in</button></form>
    <p class="muted">A token comes from <code>streamplane token create --role viewer</code> (or operator, for actions).</p>`;
  document.getElementById("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await api("login", { token: document.getElementById("token").value });
    await start();
  });
}

// -- charts --------------------------------------------------------------------------------------------------

const COLORS = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457"];

function lineChart(name, series, { width = 640, height = 180, unit = "s", scale = 1000 } = {}) {
  const names = Object.keys(series);
  const points = names.flatMap((n) => series[n]);
  const pad = 34;
  if (!points.length) return `<svg class="chart" data-chart="${esc(name)}" data-points="0" width="${width}" height="${height}"><text x="${pad}" y="${height / 2}" fill="#666">no samples yet</text></svg>`;
  const t0 = Math.min(...points.map((p) => p[0])), t1 = Math.max(...points.map((p) => p[0]), t0 + 1);
  const vmax = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => pad + ((t - t0) / (t1 - t0)) * (width - pad - 8);
  const y = (v) => height - 18 - (v / vmax) * (height - 30);
  const lines = names.map((n, i) => {
    const d = series[n].map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    return `<path d="${d}" fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.6"><title>${esc(n)}</title></path>`;
  });
  const last = points.length ? points[points.length - 1][1] : 0;
  return `<svg class="chart" data-chart="${esc(name)}" data-points="${points.length}" data-max="${vmax}" data-last="${last}" width="${width}" height="${height}">
    <text x="2" y="12" font-size="10" fill="#666">${esc((vmax / scale).toFixed(1))} ${unit}</text>
    <text x="2" y="${height - 20}" font-size="10" fill="#666">0</text>
    <text x="${pad}" y="${height - 4}" font-size="10" fill="#666">${esc(when(t0).slice(11))}</text>
    <text x="${width - 60}" y="${height - 4}" font-size="10" fill="#666">${esc(when(t1).slice(11))}</text>
    <line x1="${pad}" y1="${height - 18}" x2="${width - 8}" y2="${height - 18}" stroke="#ccc"/>${lines.join("")}</svg>
    <div class="legend">${names.map((n, i) => `<span style="color:${COLORS[i % COLORS.length]}">■ ${esc(n)}</span>`).join("")}</div>`;
}

function timeline(lane, now, from) {
  // one bar per generation, from when it opened to when it drained (or now), coloured by its state
  const gens = lane.generations;
  const start = Math.min(...gens.map((g) => g.opened?.time_ms || from || now));
  const width = 640, h = 22, span = Math.max(1, now - start);
  const x = (t) => 8 + ((t - start) / span) * (width - 16);
  const bars = gens.map((g, i) => {
    const a = g.opened?.time_ms || start;
    const b = g.drained_ms || g.abandoned_ms || now;
    return `<g data-generation="${esc(lane.name)}/${g.number}" data-state="${esc(g.state)}">
      <rect x="${x(a).toFixed(1)}" y="${4 + i * h}" width="${Math.max(3, x(b) - x(a)).toFixed(1)}" height="${h - 6}" class="bar ${esc(g.state)}" fill="${g.state === "active" ? "#2e7d32" : g.state === "draining" ? "#ef6c00" : g.state === "sealed" ? "#6a1b9a" : g.state === "abandoned" ? "#c62828" : "#90a4ae"}"/>
      <text x="${(x(a) + 4).toFixed(1)}" y="${16 + i * h}" font-size="11" fill="#fff">g${g.number} ${esc(g.cluster)} · ${esc(g.state)}</text></g>`;
  });
  return `<svg class="timeline" data-lane="${esc(lane.name)}" width="${width}" height="${gens.length * h + 8}">${bars.join("")}</svg>`;
}

// -- pages -----------------------------------------------------------------------------------------------------

const pages = {
  async fleet() {
    const f = await api(`fleet?after=${encodeURIComponent(state.fleetAfter || "")}`);
    const act = canAct();
    const probe = (c) => (c.probe ? (c.probe.reachable ? `${c.probe.latency_ms.toFixed(0)} ms, ${c.probe.brokers} brokers` : `unreachable: ${esc(c.probe.error)}`) : "—");
    const health = (c) => `${badge(c.health)} <span class="muted">${esc((c.health_reasons || []).join("; "))}</span>`;
    const drain = (c) => (act ? `<button data-drain="${esc(c.name)}">Drain…</button>` : "");
    const attention = f.attention.map((c) => `<tr data-attention="${esc(c.name)}"><td>${esc(c.name)}</td><td>${esc(c.zone || "—")}</td>
      <td>${health(c)}</td><td>${c.cordoned ? "cordoned" : ""}</td>
      <td>${c.error ? `<span class="muted">${esc(c.error)}</span>` : Object.entries(c.generations || {}).map(([s, n]) => `${n} ${esc(s)}`).join(", ") || "—"}${c.more ? " (and more)" : ""}</td>
      <td>${probe(c)}</td><td>${drain(c)}</td></tr>`);
    const rows = f.clusters.map((c) => `<tr data-cluster="${esc(c.name)}"><td>${esc(c.name)}</td><td>${esc(c.zone || "—")}</td>
      <td>${health(c)}</td><td>${esc(c.capacity_weight)}</td><td>${c.cordoned ? "cordoned" : ""}</td><td>${probe(c)}</td><td>${drain(c)}</td></tr>`);
    const counts = (by) => Object.entries(by).map(([h, n]) => `${n} ${esc(h)}`).join(", ");
    const zones = Object.entries(f.summary.by_zone).map(([z, by]) => `<tr data-zone="${esc(z)}"><td>${esc(z)}</td><td>${counts(by)}</td></tr>`);
    page.innerHTML = `<h2>Fleet</h2>
      <div class="cards"><div class="card" id="fleet-health">${f.summary.clusters} clusters: ${counts(f.summary.by_health) || "none"}</div><div class="card">${f.streams} streams</div>
      <div class="card" id="fleet-policy">${f.policy.frozen ? "<b>frozen</b>: nothing moves by itself" : "automatic failover on"}, at most ${f.policy.max_failovers_per_minute}/min
      ${act ? `<button data-freeze="${!f.policy.frozen}">${f.policy.frozen ? "Unfreeze…" : "Freeze…"}</button>` : ""}</div></div>
      <h3>Needs attention <span class="muted">${f.attention_total} cluster(s)${f.attention_total > f.attention.length ? `, the first ${f.attention.length} shown` : ""}</span></h3>
      ${table(["cluster", "zone", "health", "", "generations", "last probe", ""], attention)}
      <h3>By zone</h3>${table(["zone", "clusters"], zones)}
      <h3>Clusters</h3>${table(["cluster", "zone", "health", "capacity", "", "last probe", ""], rows)}
      ${f.next_page ? `<button id="clusters-next">Next clusters</button>` : ""}${state.fleetAfter ? ` <button id="clusters-first">First clusters</button>` : ""}
      <h3>Recent health changes</h3>${table(["time", "actor", "change"], f.health_changes.map((e) => `<tr><td>${when(e.time_ms)}</td><td>${esc(e.actor)}</td><td>${esc(e.text)}</td></tr>`))}`;
    page.querySelectorAll("[data-drain]").forEach((b) => b.addEventListener("click", () => confirmAction("drain", { cluster: b.dataset.drain, to: "" })));
    page.querySelectorAll("[data-freeze]").forEach((b) => b.addEventListener("click", () => confirmAction("freeze", { frozen: b.dataset.freeze === "true" })));
    document.getElementById("clusters-next")?.addEventListener("click", () => { state.fleetAfter = f.next_page; render(); });
    document.getElementById("clusters-first")?.addEventListener("click", () => { state.fleetAfter = ""; render(); });
  },

  async streams() {
    const q = new URLSearchParams({ prefix: state.streamPrefix || "", after: state.streamsAfter || "" });
    const got = await api(`streams?${q}`);
    if (!state.streamsAfter) state.streamsTotal = got.total;
    page.innerHTML = `<h2>Streams <span class="muted">${esc(state.streamsTotal ?? got.total)}${state.streamPrefix ? ` starting with ${esc(state.streamPrefix)}` : ""}</span></h2>
      <form class="filters" id="stream-filter"><input name="prefix" placeholder="name prefix" value="${esc(state.streamPrefix || "")}"> <button>Filter</button></form>
      ${table(["stream", "lanes"], got.streams.map((s) => `<tr data-stream="${esc(s.name)}"><td><a href="#/stream/${encodeURIComponent(s.name)}">${esc(s.name)}</a></td>
      <td>${s.lanes.map((l) => `${esc(l.name)} g${l.generation}@${esc(l.cluster)} (${l.partitions}p${l.unsettled > 1 ? `, ${l.unsettled - 1} draining` : ""})`).join(" · ")}</td></tr>`))}
      ${got.next_page ? `<button id="streams-next">Next streams</button>` : ""}${state.streamsAfter ? ` <button id="streams-first">First streams</button>` : ""}`;
    document.getElementById("stream-filter").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.streamPrefix = new FormData(ev.target).get("prefix").trim();
      state.streamsAfter = "";
      render();
    });
    document.getElementById("streams-next")?.addEventListener("click", () => { state.streamsAfter = got.next_page; render(); });
    document.getElementById("streams-first")?.addEventListener("click", () => { state.streamsAfter = ""; render(); });
  },

  async stream(name) {
    const s = await api(`stream?name=${encodeURIComponent(name)}`);
    const act = canAct();
    page.innerHTML = `<h2>Stream ${esc(s.name)}</h2>
      <p class="muted">topics: ${esc(s.topic.text)} · failover ${esc(s.failover.mode)} after ${s.failover.unhealthy_after_ms / 1000} s unhealthy</p>
      ${s.lanes.map((l) => `<h3>${esc(l.name)} <span class="muted">priority ${l.priority}</span>
        ${act ? `<button data-failover="${esc(l.name)}">Fail over…</button>` : ""}</h3>
        ${timeline(l, s.now_ms, s.history_from_ms)}
        ${table(["gen", "cluster", "topic", "partitions", "state", "opened", "by", "why", "sealed", "drained", "drain waits for"], l.generations.map((g) => `<tr data-row="${esc(l.name)}/${g.number}">
          <td>g${g.number}</td><td>${esc(g.cluster)}</td><td>${esc(g.topic)}</td><td>${g.partitions}</td><td>${badge(g.state)}</td>
          <td>${when(g.opened?.time_ms)}</td><td>${esc(g.opened?.actor || "")}</td><td>${esc(g.opened?.why || "")}</td>
          <td>${when(g.sealed_ms)}</td><td>${when(g.drained_ms || g.abandoned_ms)}</td>
          <td data-waits="${esc(l.name)}/${g.number}">${g.waiting_for?.length ? `group(s) ${g.waiting_for.map(esc).join(", ")}` : g.unread ? "a first reader: no group has read it" : ""}</td></tr>`))}`).join("")}
      <h3>Rewinds of its groups</h3>${table(["time", "group", "by", "what"], s.rewinds.map((r) => `<tr data-rewind="${esc(r.group)}"><td>${when(r.time_ms)}</td><td><a href="#/group/${encodeURIComponent(r.group)}">${esc(r.group)}</a></td><td>${esc(r.actor)}</td><td>${esc(r.reason)}</td></tr>`))}`;
    page.querySelectorAll("[data-failover]").forEach((b) => b.addEventListener("click", () => confirmAction("failover", { stream: s.name, lane: b.dataset.failover, to: "", reason: "console" })));
  },

  async groups() {
    const q = new URLSearchParams({ prefix: state.groupPrefix || "", after: state.groupsAfter || "" });
    const got = await api(`groups?${q}`);
    if (!state.groupsAfter) state.groupsTotal = `${got.total}${got.more_than_total ? "+" : ""}`;
    const lagged = (v, f) => (v === null ? `<span class="muted">not sampled yet</span>` : f(v));
    page.innerHTML = `<h2>Groups <span class="muted">${esc(state.groupsTotal ?? got.total)}${state.groupPrefix ? ` starting with ${esc(state.groupPrefix)}` : ""}</span></h2>
      <form class="filters" id="group-filter"><input name="prefix" placeholder="name prefix" value="${esc(state.groupPrefix || "")}"> <button>Filter</button></form>
      ${table(["group", "offset lag", "time lag"], got.groups.map((g) => `<tr data-group="${esc(g.name)}"><td><a href="#/group/${encodeURIComponent(g.name)}">${esc(g.name)}</a></td><td>${lagged(g.offset_lag, (v) => v)}</td><td>${lagged(g.time_lag_ms, secs)}</td></tr>`))}
      ${got.next_page ? `<button id="groups-next">Next groups</button>` : ""}${state.groupsAfter ? ` <button id="groups-first">First groups</button>` : ""}
      <p class="muted">lag as the console's sampler last read it (every few seconds)</p>`;
    document.getElementById("group-filter").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.groupPrefix = new FormData(ev.target).get("prefix").trim();
      state.groupsAfter = "";
      render();
    });
    document.getElementById("groups-next")?.addEventListener("click", () => { state.groupsAfter = got.next_page; render(); });
    document.getElementById("groups-first")?.addEventListener("click", () => { state.groupsAfter = ""; render(); });
  },

  async group(name) {
    const g = await api(`group?name=${encodeURIComponent(name)}`);
    state.data = g;
    renderGroup();
  },

  async events() {
    const q = state.filters || {};
    const params = new URLSearchParams(Object.entries(q).filter(([, v]) => v));
    const found = await api(`events?${params}`);
    page.innerHTML = `<h2>Event log</h2>
      <form class="filters" id="filters">${["stream", "group", "actor", "kind"].map((k) => `<input name="${k}" placeholder="${k}" value="${esc(q[k] || "")}">`).join("")}
      <button>Filter</button> <label><input type="checkbox" id="tail" ${state.tail ? "checked" : ""}> live tail</label></form>
      <table id="events"><tr><th>time</th><th>actor</th><th>kind</th><th>what</th></tr>${found.events.map(eventRow).join("")}</table>
      ${found.more ? `<p class="muted">older events: narrow the filters</p>` : ""}`;
    document.getElementById("filters").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.filters = Object.fromEntries(new FormData(ev.target));
      openLive(state.filters.group || null);
      render();
    });
    document.getElementById("tail").addEventListener("change", (ev) => { state.tail = ev.target.checked; });
  },
};

// A burst of events (a drain moves dozens of lanes) reads the shown page once, not once per event.
let pending = null;
const soon = (fn) => {
  if (!pending) pending = setTimeout(() => { pending = null; fn(); }, 200);
};

const eventRow = (e) => `<tr class="event" data-kind="${esc(e.kind)}"><td>${when(e.time_ms)}</td><td>${esc(e.actor)}</td><td>${esc(e.kind)}</td><td>${esc(e.text)}</td></tr>`;

function renderGroup() {
  const g = state.data;
  const laneSeries = {}, partSeries = {};
  for (const s of g.history) {
    for (const [k, v] of Object.entries(s.lanes)) (laneSeries[k] ||= []).push([s.at_ms, v]);
    for (const [k, v] of Object.entries(s.partitions)) (partSeries[k] ||= []).push([s.at_ms, v]);
  }
  const workers = g.members.map((m) => `<tr><td>${esc(m.worker_id)}</td><td>${m.capacity}</td><td>${m.max_load || "—"}</td><td>${m.cpu.toFixed(2)}</td>
    <td>${m.records_per_s.toFixed(0)}</td><td>${m.leases}</td><td>${m.lag_records}</td><td>${m.ttl_left_ms} ms</td></tr>`);
  const leases = Object.entries(g.leases).flatMap(([w, ls]) => ls.map((x) => `<tr><td>${esc(w || "(free)")}</td><td>${esc(x.lease_id)}</td><td>${x.epoch}</td><td>${esc(x.state)}</td><td>${x.load.records_per_s.toFixed(0)}</td><td>${x.load.lag_records}</td></tr>`));
  page.innerHTML = `<h2>Group ${esc(g.name)}</h2><p class="muted">assignment loop on ${esc(g.leader_replica || "no leader")}</p>
    ${g.where ? `<p data-where>every member filters with <code>where ${esc(g.where)}</code></p>` : ""}
    <div class="cards">${g.lag.lanes.map((l) => `<div class="card" data-lane-lag="${esc(l.stream)}/${esc(l.lane)}">${esc(l.stream)}/${esc(l.lane)}: ${secs(l.time_lag_ms)} · ${l.offset_lag} records</div>`).join("") || `<div class="card">no progress yet</div>`}
    <div class="card">retry backlog: ${g.retry_backlog.offsets} offsets</div><div class="card">rejected: ${g.rejects.total}</div>${g.filtered ? `<div class="card" data-filtered>left out by where: ${g.filtered}</div>` : ""}</div>
    <h3>Time lag per lane (last hour)</h3>${lineChart("lanes", laneSeries)}
    <h3>Time lag of the most lagged partitions</h3>${lineChart("partitions", partSeries)}
    <h3>Workers</h3>${table(["worker", "capacity", "max load", "cpu", "records/s", "leases", "lag records", "session ttl left"], workers)}
    <h3>Leases</h3>${table(["worker", "lease", "epoch", "state", "records/s", "lag records"], leases)}
    ${g.slices.length ? `<h3>Split partitions</h3><p class="muted">each read in key slices by as many workers; each slice holder fetches the whole partition</p>${table(["partition", "slice", "worker", "epoch", "state", "records/s", "lag"], g.slices.flatMap((p) => p.slices.map((x) => `<tr data-slice="${esc(p.partition)}/${esc(x.slice)}"><td>${esc(p.partition)}</td><td>${esc(x.slice)}</td><td>${esc(x.worker_id || "(free)")}</td><td>${x.epoch}</td><td>${esc(x.state)}</td><td>${x.records_per_s.toFixed(0)}</td><td>${secs(x.lag_ms)}</td></tr>`)))}` : ""}
    <h3>Retry backlog</h3>${table(["partition", "offsets in retry", "low watermark"], g.retry_backlog.partitions.map((r) => `<tr><td>${esc(r.lease_id)}</td><td>${r.retries}</td><td>${r.low_watermark}</td></tr>`))}
    <h3 id="dlq">Dead-letter queue</h3>
    <div class="cards"><div class="card" data-dlq="pending">pending: ${g.dlq.pending}</div><div class="card" data-dlq="redriven">redriven: ${g.dlq.redriven}</div><div class="card" data-dlq="purged">purged: ${g.dlq.purged}</div>
      ${canAct() ? g.dlq.streams.map((s) => `<button data-redrive="${esc(s)}">Redrive ${esc(s)}…</button>`).join("") : ""}</div>
    <h4>By error (of the first ${g.dlq.sampled})</h4>${table(["error", "records"], g.dlq.by_error.map((e) => `<tr><td>${esc(e.reason)}</td><td>${e.count}</td></tr>`))}
    <h4>Rejects (first 50) and where they went</h4>${table(["partition", "offset", "attempts", "state", "reason", "dlq copy"], g.rejects.first.map((r) => `<tr><td>${esc(r.lease_id)}</td><td>${r.offset}</td><td>${r.attempts || "—"}</td><td>${esc(r.state)}</td><td>${esc(r.reason)}</td><td>${r.dlq && r.dlq.lane ? `${esc(r.dlq.stream)}/${esc(r.dlq.lane)}/g${r.dlq.generation}/p${r.dlq.partition} @ ${r.dlq.offset}` : "—"}</td></tr>`))}
    <h3>Recent group events</h3>${table(["time", "change", "what"], g.events.map((e) => `<tr><td>${when(e.time_ms)}</td><td>${esc(e.kind)}</td><td>${esc(e.text)}</td></tr>`))}`;
  page.querySelectorAll("[data-redrive]").forEach((b) => b.addEventListener("click", () => previewRedrive(g.name, b.dataset.redrive)));
}

async function previewRedrive(group, stream) {
  try {
    const preview = await api("actions/redrive", { group, stream, confirm: false });
    document.getElementById("confirm-title").textContent = "redrive: what it produces again";
    document.getElementById("confirm-moves").innerHTML = preview.moves.map((m) => `<li>${esc(m)}</li>`).join("");
    document.getElementById("confirm-error").textContent = "";
    document.getElementById("confirm").showModal();
  } catch (e) {
    alert(e.message);
  }
}

// -- actions ---------------------------------------------------------------------------------------------------

const canAct = () => state.me && state.me.actions && state.me.may_operate;

async function confirmAction(kind, body) {
  const dialog = document.getElementById("confirm");
  const err = document.getElementById("confirm-error");
  err.textContent = "";
  try {
    const preview = await api(`actions/${kind}`, { ...body, confirm: false });
    document.getElementById("confirm-title").textContent = `${preview.action}: what will move`;
    document.getElementById("confirm-moves").innerHTML = preview.moves.map((m) => `<li>${esc(m)}</li>`).join("");
    const to = preview.to?.cluster;
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async function once() {
      dialog.removeEventListener("close", once);
      if (dialog.returnValue !== "go") return;
      try {
        await api(`actions/${kind}`, { ...body, ...(to ? { to } : {}), confirm: true });
        render();
      } catch (e) { alert(e.message); }
    });
  } catch (e) {
    alert(e.message);
  }
}

// -- live updates and routing ------------------------------------------------------------------------------------

function openLive(group) {
  if (state.live && state.liveGroup === group) return;
  if (state.live) state.live.close();
  state.liveGroup = group;
  state.live = new EventSource(`/api/live${group ? `?group=${encodeURIComponent(group)}` : ""}`);
  const dot = document.getElementById("live");
  state.live.addEventListener("hello", () => dot.classList.add("on"));
  state.live.onerror = () => dot.classList.remove("on");
  state.live.addEventListener("topology", (m) => {
    const e = JSON.parse(m.data);
    const [view] = state.route;
    if (view === "events") {
      const f = state.filters || {};
      const match = (!f.stream || e.stream === f.stream) && (!f.group || e.group === f.group) && (!f.actor || e.actor.includes(f.actor)) && (!f.kind || e.kind === f.kind);
      if (state.tail && match) document.querySelector("#events tr")?.insertAdjacentHTML("afterend", eventRow(e));
    } else if (view !== "group") {
      soon(render); // a change the shown page may depend on: read it again
    }
  });
  state.live.addEventListener("group", (m) => {
    const [view] = state.route;
    if (view === "group") soon(() => pages.group(state.route[1]));
    else if (view === "events" && state.tail) document.querySelector("#events tr")?.insertAdjacentHTML("afterend", eventRow(JSON.parse(m.data)));
  });
  state.live.addEventListener("lag", (m) => {
    const sample = JSON.parse(m.data);
    if (state.route[0] === "group" && state.data && sample.at_ms) {
      state.data.history.push(sample);
      for (const l of state.data.lag.lanes) l.time_lag_ms = sample.lanes[`${l.stream}/${l.lane}`] ?? l.time_lag_ms;
      renderGroup();
    }
  });
}

async function render() {
  const [view, ...args] = (location.hash.replace(/^#\//, "") || "fleet").split("/").map(decodeURIComponent);
  state.route = [view, ...args];
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.getAttribute("href") === `#/${view}` || a.getAttribute("href") === `#/${view}s`));
  openLive(view === "group" ? args[0] : view === "events" ? (state.filters?.group || null) : null);
  try {
    await (pages[view] || pages.fleet)(...args);
  } catch (e) {
    if (!String(e.message).includes("sign in")) page.innerHTML = `<p class="error">${esc(e.message)}</p>`;
  }
}

async function start() {
  try {
    state.me = await api("whoami");
  } catch (e) {
    return;
  }
  document.getElementById("whoami").textContent = `${state.me.name} (${state.me.role}${state.me.actions ? "" : ", read-only console"})`;
  await render();
}

window.addEventListener("hashchange", render);
start();
