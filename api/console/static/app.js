// The laketail console: a hash-routed single page (#/overview, #/topics, #/topics/<t>,
// #/messages?topic=&partition=&q=, #/groups, #/groups/<g>, #/transactions, #/sql,
// #/signin). Every view reads the gateway's public API through api(), one bounded
// page at a time; failures are shown in the page, never thrown to the console.

import { api, ApiError, cluster, credentials, enc, signIn, signOut } from "./api.js";
import { lineChart } from "./chart.js";

const view = document.getElementById("view");
const PAGE = 50;

// -- small DOM helpers ----------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// A header takes its column's alignment: right-aligned ("num") when the column's cells
// are, so a number sits under its own header and not under its neighbour's.
function table(columns, rows, attrs = {}) {
  const first = rows.length ? Array.from(rows[0].children) : [];
  const numeric = columns.map((_, i) => Boolean(first[i] && first[i].classList.contains("num")));
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c, i) => h("th", { class: numeric[i] ? "num" : null }, c)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "none"))));
}

function num(n) {
  return n === null || n === undefined ? "" : Number(n).toLocaleString("en-US");
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n || 0);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// The seeds' lag grades: OK < 100, caution < 1,000, warning < 10,000, critical.
export function lagStatus(lag) {
  if (lag < 100) return "OK";
  if (lag < 1000) return "caution";
  if (lag < 10000) return "warning";
  return "critical";
}

function lagCell(lag) {
  const status = lagStatus(lag);
  return h("td", { class: `num lag lag-${status.toLowerCase()}`, title: status }, num(lag));
}

function errorBox(err) {
  return h("div", { class: "error", role: "alert" }, err instanceof ApiError ? err.message : String(err));
}

function pager(meta, go) {
  const { total, limit, offset } = meta;
  const last = Math.min(offset + limit, total);
  return h("div", { class: "pager" },
    h("button", { disabled: offset <= 0, onclick: () => go(Math.max(offset - limit, 0)) }, "‹ previous"),
    h("span", { class: "muted" }, total ? `${offset + 1}–${last} of ${num(total)}` : "0 of 0"),
    h("button", { disabled: last >= total, onclick: () => go(offset + limit) }, "next ›"));
}

function query() {
  const hash = location.hash.replace(/^#/, "");
  const [path, qs] = hash.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(qs || "") };
}

function link(path, text, attrs = {}) {
  return h("a", { href: `#${path}`, ...attrs }, text);
}

function render(...nodes) {
  view.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
  view.dataset.state = "ready";
}

// -- overview -------------------------------------------------------------------------

let lastCounters = null;
let refresh = null; // the overview's own refresh timer

async function overview() {
  const doc = await api("/v1/console/overview");
  let rates = "measuring…";
  if (lastCounters && doc.time_ms > lastCounters.time_ms) {
    const s = (doc.time_ms - lastCounters.time_ms) / 1000;
    const p = (doc.produce_records_total - lastCounters.produce) / s;
    const f = (doc.fetch_records_total - lastCounters.fetch) / s;
    rates = `${p.toFixed(1)} records/s produced, ${f.toFixed(1)} records/s fetched`;
  }
  lastCounters = { time_ms: doc.time_ms, produce: doc.produce_records_total, fetch: doc.fetch_records_total };
  const parts = doc.partitions;
  render(
    h("h1", {}, "Overview"),
    h("p", { class: "muted" }, `cluster ${doc.cluster_id} · answered by broker ${doc.broker_id}`),
    h("div", { class: "cards" },
      card("Brokers", `${doc.brokers.filter((b) => b.alive).length} / ${doc.brokers.length} alive`),
      card("Topics", num(doc.topics), `${doc.internal_topics} internal`),
      card("Partitions online", num(parts.online), `of ${num(parts.total)}`, "ok"),
      card("Under-replicated", num(parts.under_replicated), "", parts.under_replicated ? "warning" : "ok"),
      card("Offline", num(parts.offline), "", parts.offline ? "critical" : "ok"),
      card("Tier delay", `${num(doc.tier_delay_records)} records`, `max ${num(doc.max_tier_delay_records)} in one partition`),
      card("Throughput (this broker)", rates, `${num(doc.produce_records_total)} produced · ${num(doc.fetch_records_total)} fetched`)),
    h("h2", {}, "Brokers"),
    table(["id", "url", "alive", "controller"], doc.brokers.map((b) => h("tr", {},
      h("td", { class: "num" }, b.broker_id), h("td", {}, b.url), h("td", { class: b.alive ? "good" : "bad" }, b.alive ? "yes" : "no"),
      h("td", {}, b.controller ? "controller" : ""))), { id: "brokers" }),
    h("p", { class: "muted" }, "refreshes every 5 s"));
  refresh = setTimeout(() => { if (view.dataset.page === "overview") route(); }, 5000);
}

function card(title, value, note = "", tone = "") {
  return h("div", { class: `card ${tone}` }, h("div", { class: "card-title" }, title),
    h("div", { class: "card-value" }, value), note ? h("div", { class: "muted" }, note) : null);
}

// -- topics ---------------------------------------------------------------------------

async function topics(params) {
  const offset = Number(params.get("offset") || 0);
  const q = params.get("q") || "";
  const internal = params.get("internal") === "true";
  const doc = await api(`/v1/console/topics?limit=${PAGE}&offset=${offset}&q=${enc(q)}&internal=${internal}`);
  const go = (o) => { location.hash = `#/topics?offset=${o}&q=${enc(q)}&internal=${internal}`; };
  const search = h("input", { type: "search", placeholder: "filter topics", value: q, id: "topic-filter" });
  const form = h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = `#/topics?q=${enc(search.value)}&internal=${internal}`; } },
    search, h("label", {}, h("input", { type: "checkbox", checked: internal, onchange: (e) => { location.hash = `#/topics?q=${enc(q)}&internal=${e.target.checked}`; } }), " internal"),
    h("button", {}, "Filter"));
  const deleted = params.get("deleted");
  render(h("h1", {}, "Topics"),
    deleted ? h("div", { class: "good", id: "topic-deleted" }, `topic ${deleted} deleted`) : null,
    form,
    table(["topic", "partitions", "replication", "offsets", "size", "retention.ms", "cleanup.policy"],
      doc.data.map((t) => h("tr", {},
        h("td", {}, link(`/topics/${enc(t.topic_name)}`, t.topic_name)), h("td", { class: "num" }, t.partitions_count),
        h("td", { class: "num" }, t.replication_factor),
        h("td", { class: "num", title: "high watermark minus log start, summed: offsets, not records (transaction markers and aborted records hold offsets too)" }, num(t.offsets)),
        h("td", { class: "num" }, bytes(t.size_bytes)), h("td", { class: "num" }, t.retention_ms),
        h("td", {}, t.cleanup_policy))), { id: "topics" }),
    pager(doc, go),
    createTopicForm());
}

// Create a topic through v3's CreateTopics (the same route, and ACL, as any client).
function createTopicForm() {
  const name = h("input", { name: "topic_name", required: true, placeholder: "name" });
  const partitions = h("input", { name: "partitions_count", type: "number", min: 1, placeholder: "broker default" });
  const rf = h("input", { name: "replication_factor", type: "number", min: 1, placeholder: "broker default" });
  const policy = h("select", { name: "cleanup.policy" }, ["delete", "compact"].map((v) => h("option", { value: v }, v)));
  const status = h("div", { id: "create-status" });
  return h("section", { id: "create-topic" }, h("h2", {}, "Create a topic"),
    h("form", { class: "inline", onsubmit: async (e) => {
      e.preventDefault();
      const body = { topic_name: name.value.trim(), configs: [{ name: "cleanup.policy", value: policy.value }] };
      if (partitions.value) body.partitions_count = Number(partitions.value);
      if (rf.value) body.replication_factor = Number(rf.value);
      try {
        const c = await cluster();
        await api(`/v3/clusters/${c}/topics`, { method: "POST", body });
        location.hash = `#/topics/${enc(body.topic_name)}`;
      } catch (err) {
        status.replaceChildren(errorBox(err));
      }
    } }, field("name", name), field("partitions", partitions), field("replication factor", rf),
    field("cleanup.policy", policy), h("button", { id: "create-topic-button" }, "Create")), status);
}

// A form control with its visible label (the label element wraps it).
function field(text, control) {
  return h("label", { class: "field" }, h("span", {}, text), control);
}

async function topic(name, params) {
  const offset = Number(params.get("offset") || 0);
  const c = await cluster();
  const [parts, configs, delta] = await Promise.all([
    api(`/v1/console/topics/${enc(name)}/partitions?limit=${PAGE}&offset=${offset}`),
    api(`/v3/clusters/${c}/topics/${enc(name)}/configs`),
    api(`/v1/console/topics/${enc(name)}/table`),
  ]);
  const status = h("div", { id: "config-status" });
  const rows = configs.data.map((cfg) => {
    const input = h("input", { value: cfg.value ?? "", "data-config": cfg.name, disabled: cfg.is_read_only });
    const save = h("button", {
      disabled: cfg.is_read_only,
      onclick: async () => {
        try {
          await api(`/v3/clusters/${c}/topics/${enc(name)}/configs:alter`, { method: "POST", body: { data: [{ name: cfg.name, value: input.value }] } });
          status.replaceChildren(h("div", { class: "good" }, `${cfg.name} = ${input.value}`));
        } catch (err) {
          status.replaceChildren(errorBox(err));
        }
      },
    }, "Save");
    return h("tr", {}, h("td", {}, cfg.name), h("td", {}, input), h("td", { class: "muted" }, cfg.source), h("td", {}, save));
  });
  const last = delta.last_commit;
  render(
    h("h1", {}, "Topic ", h("code", {}, name)),
    h("p", {}, link(`/messages?topic=${enc(name)}&partition=all`, "Browse messages →")),
    h("h2", {}, "Partitions"),
    table(["partition", "leader", "replicas", "ISR", "log start", "high watermark", "last stable", "tiered", "log end"],
      parts.data.map((p) => h("tr", { class: p.isr.length < p.replicas.length ? "under-replicated" : "" },
        h("td", { class: "num" }, link(`/messages?topic=${enc(name)}&partition=${p.partition_id}`, p.partition_id)),
        h("td", { class: "num" }, p.leader), h("td", {}, p.replicas.join(", ")), h("td", {}, p.isr.join(", ")),
        h("td", { class: "num" }, num(p.log_start_offset)), h("td", { class: "num" }, num(p.high_watermark)),
        h("td", { class: "num" }, num(p.last_stable_offset)), h("td", { class: "num" }, num(p.tiered_offset)),
        h("td", { class: "num" }, num(p.log_end_offset)))), { id: "partitions" }),
    pager(parts, (o) => { location.hash = `#/topics/${enc(name)}?offset=${o}`; }),
    h("h2", {}, "Delta table"),
    h("dl", { class: "facts", id: "delta" },
      h("dt", {}, "location"), h("dd", {}, h("code", {}, delta.uri)),
      h("dt", {}, "version"), h("dd", {}, delta.version),
      h("dt", {}, "files"), h("dd", {}, `${num(delta.files)} (${bytes(delta.size_bytes)})`),
      h("dt", {}, "last commit"), h("dd", {}, last ? `${new Date(last.timestamp).toISOString()} · ${last.operation}` : "none yet")),
    table(["version", "time", "operation"], delta.history.map((e) => h("tr", {},
      h("td", { class: "num" }, e.version), h("td", {}, new Date(e.timestamp).toISOString()), h("td", {}, e.operation)))),
    h("h2", {}, "Configs"), status,
    table(["name", "value", "source", ""], rows, { id: "configs" }),
    deleteTopicForm(name));
}

// Delete a topic through v3's DeleteTopics, once its name is typed again.
function deleteTopicForm(name) {
  const confirm = h("input", { name: "confirm", placeholder: `type ${name} to confirm`, autocomplete: "off" });
  const button = h("button", { id: "delete-topic-button", class: "danger", disabled: true }, "Delete topic");
  confirm.addEventListener("input", () => { button.disabled = confirm.value !== name; });
  const status = h("div", { id: "delete-status" });
  return h("section", { id: "delete-topic" }, h("h2", {}, "Delete this topic"),
    h("p", { class: "muted" }, "Deletes its partitions, its Delta table and its records, as v3's DeleteTopics does."),
    h("form", { class: "inline", onsubmit: async (e) => {
      e.preventDefault();
      if (confirm.value !== name) return;
      try {
        const c = await cluster();
        await api(`/v3/clusters/${c}/topics/${enc(name)}`, { method: "DELETE" });
        location.hash = `#/topics?deleted=${enc(name)}`;
      } catch (err) {
        status.replaceChildren(errorBox(err));
      }
    } }, field("topic name", confirm), button), status);
}

// -- messages -------------------------------------------------------------------------

function b64bytes(text) {
  if (text === null || text === undefined) return null;
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function show(data, format, note = true) {
  if (data === null) return h("span", { class: "muted" }, "null");
  if (format === "hex") return h("code", {}, Array.from(data, (b) => b.toString(16).padStart(2, "0")).join(" "));
  const text = new TextDecoder("utf-8", { fatal: false }).decode(data);
  if (format === "json") {
    try {
      return h("pre", {}, JSON.stringify(JSON.parse(text), null, 2));
    } catch {
      return h("span", {}, text, note ? h("span", { class: "muted" }, " (not JSON)") : null);
    }
  }
  return h("span", {}, text);
}

const V2_BINARY = { Accept: "application/vnd.kafka.binary.v2+json" };
const CHUNK = 500; // records per fetch request
const SCAN_MAX = 10000; // records a search reads at most, all partitions together

function text(data) {
  return data === null ? "" : new TextDecoder("utf-8", { fatal: false }).decode(data);
}

// Whether a record's key, value or a header (name or value) holds `needle` (any case).
export function matches(record, needle) {
  if (!needle) return true;
  const n = needle.toLowerCase();
  const parts = [text(b64bytes(record.key)), text(b64bytes(record.value))];
  for (const hd of record.headers || []) parts.push(hd.key || "", text(b64bytes(hd.value)));
  return parts.some((p) => p.toLowerCase().includes(n));
}

// Records of partition p in [lo, hi), through the v2 fetch, in offset order.
async function fetchRange(t, p, lo, hi, iso, scan) {
  const out = [];
  let at = lo;
  while (at < hi && scan.left > 0) {
    const want = Math.min(hi - at, CHUNK, scan.left);
    const got = await api(`/topics/${enc(t)}/partitions/${p}/records?offset=${at}&max_records=${want}&isolation_level=${iso}&timeout=0`,
      { headers: V2_BINARY });
    if (!got.length) break; // nothing more below hi (aborted or compacted away)
    const inRange = got.filter((r) => r.offset < hi);
    scan.left -= inRange.length;
    scan.read += inRange.length;
    out.push(...inRange.map((r) => ({ ...r, partition: p })));
    at = got[got.length - 1].offset + 1;
  }
  return out;
}

// Up to `want` records of one partition matching `needle`: newest first (walking back
// from `end`), or oldest first from `start`.
async function partitionRecords(t, p, { start, end, logStart, newest, want, needle, iso, scan }) {
  const found = [];
  if (newest) {
    let hi = end;
    while (hi > logStart && found.length < want && scan.left > 0) {
      const lo = Math.max(logStart, hi - (needle ? CHUNK : want - found.length));
      const chunk = await fetchRange(t, p, lo, hi, iso, scan);
      found.push(...chunk.reverse().filter((r) => matches(r, needle)));
      hi = lo;
    }
  } else {
    let at = start;
    while (at < end && found.length < want && scan.left > 0) {
      const hi = Math.min(end, at + (needle ? CHUNK : want - found.length));
      found.push(...(await fetchRange(t, p, at, hi, iso, scan)).filter((r) => matches(r, needle)));
      at = hi;
    }
  }
  return found.slice(0, want);
}

async function messages(params) {
  const names = await api("/topics"); // names only (v2): no per-topic work on the server
  const t = params.get("topic") || names[0] || "";
  const part = params.get("partition") || "all";
  const mode = params.get("from") || "newest";
  const at = params.get("at") || "";
  const fmt = params.get("format") || "text";
  const iso = params.get("isolation") || "read_committed";
  const needle = params.get("q") || "";
  const limit = Math.min(Math.max(Number(params.get("limit") || 50), 1), 500);
  if (!t) {
    render(h("h1", {}, "Messages"), h("p", { class: "muted" }, "no topics yet"));
    return;
  }
  const states = (await api(`/v1/console/topics/${enc(t)}/partitions?limit=1000`)).data;  // for the choice
  const controls = {
    topic: h("select", { name: "topic" }, names.map((n) => h("option", { value: n, selected: n === t }, n))),
    partition: h("select", { name: "partition" }, h("option", { value: "all", selected: part === "all" }, "all partitions"),
      states.map((s) => h("option", { value: String(s.partition_id), selected: String(s.partition_id) === part }, String(s.partition_id)))),
    from: h("select", { name: "from" }, [["newest", "newest first"], ["oldest", "oldest first"], ["offset", "from offset"], ["timestamp", "from time"]]
      .map(([v, l]) => h("option", { value: v, selected: v === mode }, l))),
    at: h("input", { name: "at", placeholder: "offset or ISO time", value: at }),
    q: h("input", { name: "q", type: "search", placeholder: "text in key, value or headers", value: needle }),
    format: h("select", { name: "format" }, ["text", "json", "hex"].map((v) => h("option", { value: v, selected: v === fmt }, v))),
    isolation: h("select", { name: "isolation" }, ["read_committed", "read_uncommitted"].map((v) => h("option", { value: v, selected: v === iso }, v))),
    limit: h("input", { name: "limit", type: "number", min: 1, max: 500, value: limit }),
  };
  const labels = { topic: "topic", partition: "partition", from: "order", at: "offset or time", q: "search", format: "format", isolation: "isolation", limit: "records" };
  const form = h("form", { class: "inline", id: "browse", onsubmit: (e) => {
    e.preventDefault();
    const qs = new URLSearchParams();
    for (const [k, node] of Object.entries(controls)) qs.set(k, node.value);
    if (controls.topic.value !== t) qs.set("partition", "all"); // another topic's partitions
    location.hash = `#/messages?${qs}`;
  } }, Object.entries(controls).map(([k, node]) => field(labels[k], node)), h("button", {}, "Show"));
  const body = h("div", { id: "records" });
  let first = states;
  const load = async () => {
    view.dataset.state = "loading"; // until the records are in
    try {
      // offsets read afresh at each later load: after a produce, the new end
      const now = first || (await api(`/v1/console/topics/${enc(t)}/partitions?limit=1000`)).data;
      first = null;
      const chosen = part === "all" ? now : now.filter((s) => String(s.partition_id) === part);
      if (!chosen.length) throw new Error(`partition ${part} of ${t} does not exist`);
      const scan = { left: needle ? SCAN_MAX : Infinity, read: 0 };
      const newest = mode === "newest";
      let ms = null;
      if (mode === "timestamp") {
        ms = Date.parse(at);
        if (Number.isNaN(ms)) throw new Error(`'${at}' is not a time (use ISO 8601, e.g. 2026-01-01T00:00:00Z)`);
      }
      let records = [];
      for (const state of chosen) {
        const end = iso === "read_committed" ? state.last_stable_offset : state.high_watermark;
        const p = state.partition_id;
        let start = state.log_start_offset;
        if (mode === "offset") start = Math.min(Math.max(Number(at || 0), state.log_start_offset), end);
        if (mode === "timestamp") {
          const found = await api(`/v1/topics/${enc(t)}/partitions/${p}/offsets?timestamp=${ms}&isolation_level=${iso}`);
          start = found.offset < 0 ? end : found.offset;
        }
        records.push(...await partitionRecords(t, p, { start, end, logStart: state.log_start_offset, newest, want: limit, needle, iso, scan }));
      }
      // across partitions, by time (then partition and offset), newest or oldest first
      const order = (a, b) => (a.timestamp - b.timestamp) || (a.partition - b.partition) || (a.offset - b.offset);
      records.sort(newest ? (a, b) => order(b, a) : order);
      records = records.slice(0, limit);
      const where = part === "all" ? `${chosen.length} partitions` : `partition ${part}`;
      const searched = needle ? ` · searched ${num(scan.read)} records for “${needle}”${scan.left <= 0 ? ` (stopped at ${num(SCAN_MAX)}: narrow by partition, offset or time)` : ""}` : "";
      const one = chosen.length === 1 ? chosen[0] : null;
      body.replaceChildren(
        h("p", { class: "muted", id: "records-summary" }, one
          ? `log start ${num(one.log_start_offset)} · ${iso === "read_committed" ? "last stable" : "high watermark"} ${num(iso === "read_committed" ? one.last_stable_offset : one.high_watermark)} · `
          : `${where} · `, `${records.length} shown${searched}`),
        table(["partition", "offset", "timestamp", "key", "value", "headers"], records.map((r) => h("tr", { class: "record" },
          h("td", { class: "num" }, r.partition), h("td", { class: "num" }, r.offset), h("td", {}, new Date(r.timestamp).toISOString()),
          h("td", { class: "key" }, show(b64bytes(r.key), fmt, false)), h("td", { class: "value" }, show(b64bytes(r.value), fmt)),
          h("td", {}, (r.headers || []).map((hd) => h("div", {}, h("b", {}, hd.key), ": ", show(b64bytes(hd.value), fmt, false)))))),
        { id: "record-table" }));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
    view.dataset.state = "ready";
  };
  render(h("h1", {}, "Messages"), form, body, produceForm(t, part, load));
  await load();
}

function produceForm(t, part, reload) {
  const key = h("input", { name: "key", placeholder: "key (text, empty: null)" });
  const value = h("textarea", { name: "value", placeholder: "value (text)" });
  const header = h("input", { name: "header", placeholder: "header name=value (optional)" });
  const status = h("div", { id: "produce-status" });
  const where = part === "all" ? `${t} (partition chosen by key)` : `${t}-${part}`;
  return h("form", { id: "produce", class: "stack", onsubmit: async (e) => {
    e.preventDefault();
    const c = await cluster();
    const record = { value: { type: "STRING", data: value.value } };
    if (part !== "all") record.partition_id = Number(part);
    if (key.value) record.key = { type: "STRING", data: key.value };
    if (header.value.includes("=")) {
      const [name, ...rest] = header.value.split("=");
      record.headers = [{ name, value: btoa(unescape(encodeURIComponent(rest.join("=")))) }];
    }
    try {
      const report = await api(`/v3/clusters/${c}/topics/${enc(t)}/records`, { method: "POST", body: record });
      if (report.error_code && report.error_code !== 200) throw new ApiError(400, report.error_code, report.message);
      await reload(); // the new record in the list (read_committed: once it is stable)
      status.replaceChildren(h("div", { class: "good" }, `produced at ${t}-${report.partition_id}@${report.offset}`));
    } catch (err) {
      status.replaceChildren(errorBox(err));
    }
  } }, h("h2", {}, `Produce a test record to ${where}`), field("key", key), field("value", value), field("header", header),
  h("button", {}, "Produce"), status);
}

// -- consumer groups ------------------------------------------------------------------

async function groups(params) {
  const offset = Number(params.get("offset") || 0);
  const q = params.get("q") || "";
  const doc = await api(`/v1/console/groups?limit=${PAGE}&offset=${offset}&q=${enc(q)}`);
  const search = h("input", { type: "search", placeholder: "filter groups", value: q });
  render(h("h1", {}, "Consumer groups"),
    h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = `#/groups?q=${enc(search.value)}`; } }, search, h("button", {}, "Filter")),
    table(["group", "state", "members", "partitions", "total lag"], doc.data.map((g) => h("tr", {},
      h("td", {}, link(`/groups/${enc(g.group_id)}`, g.group_id)), h("td", {}, g.state), h("td", { class: "num" }, g.members),
      h("td", { class: "num" }, g.partitions), lagCell(g.total_lag))), { id: "groups" }),
    pager(doc, (o) => { location.hash = `#/groups?offset=${o}&q=${enc(q)}`; }));
}

async function group(id, params) {
  const offset = Number(params.get("offset") || 0);
  const [doc, history] = await Promise.all([
    api(`/v1/console/groups/${enc(id)}?limit=${PAGE}&offset=${offset}`),
    api(`/v1/console/groups/${enc(id)}/lag-history?max_points=300`),
  ]);
  const chart = h("div", { id: "lag-chart" }, lineChart(history.points.map((pt) => ({ x: pt.time_ms, y: pt.lag })),
    { label: "records of lag", format: num, integer: true }));
  render(
    h("h1", {}, "Consumer group ", h("code", {}, id)),
    h("div", { class: "cards" }, card("State", doc.state), card("Members", doc.members.length),
      card("Total lag", num(doc.total_lag), lagStatus(doc.total_lag), lagStatus(doc.total_lag).toLowerCase()),
      card("Lag in time", duration(doc.max_time_lag_ms))),
    h("h2", {}, "Lag over time"), chart,
    h("h2", {}, "Lag per partition"),
    table(["topic", "partition", "committed", "log end", "lag", "lag in time", "consumer"], doc.lags.data.map((l) => h("tr", {},
      h("td", {}, l.topic), h("td", { class: "num" }, l.partition), h("td", { class: "num" }, num(l.current_offset)),
      h("td", { class: "num" }, num(l.log_end_offset)), lagCell(l.lag), h("td", { class: "num" }, duration(l.time_lag_ms)),
      h("td", {}, l.client_id || l.consumer_id))), { id: "lags" }),
    pager(doc.lags, (o) => { location.hash = `#/groups/${enc(id)}?offset=${o}`; }),
    h("h2", {}, "Members"),
    table(["member", "client", "host", "assignment"], doc.members.map((m) => h("tr", {},
      h("td", {}, m.member_id), h("td", {}, m.client_id), h("td", {}, m.client_host),
      h("td", {}, m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", ")))), { id: "members" }),
    resetForm(id, doc));
}

function resetForm(id, doc) {
  const topics = [...new Set(doc.lags.data.map((l) => l.topic))];
  const topicInput = h("input", { name: "topic", value: topics[0] || "", placeholder: "topic" });
  const to = h("select", { name: "to" }, [["earliest", "--to-earliest"], ["latest", "--to-latest"], ["datetime", "--to-datetime"], ["offset", "--to-offset"]]
    .map(([v, l]) => h("option", { value: v }, l)));
  const arg = h("input", { name: "arg", placeholder: "offset, or ISO time for --to-datetime" });
  const out = h("div", { id: "reset-result" });
  const send = async (execute) => {
    const body = { topic: topicInput.value, to: to.value, execute };
    if (to.value === "offset") body.offset = Number(arg.value);
    if (to.value === "datetime") body.datetime_ms = Date.parse(arg.value);
    try {
      const res = await api(`/v1/console/groups/${enc(id)}/reset-offsets`, { method: "POST", body });
      out.replaceChildren(h("p", { class: execute ? "good" : "muted" }, execute ? "offsets reset" : "dry run: nothing changed"),
        table(["topic", "partition", "current", "new"], res.offsets.map((r) => h("tr", {},
          h("td", {}, r.topic), h("td", { class: "num" }, r.partition), h("td", { class: "num" }, r.current_offset),
          h("td", { class: "num new-offset" }, r.new_offset)))));
      if (execute) setTimeout(route, 0);
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  const disabled = doc.members.length > 0;
  return h("section", { id: "reset" }, h("h2", {}, "Reset offsets"),
    disabled ? h("p", { class: "muted" }, "Offsets can only be reset while the group has no members.") : null,
    h("form", { class: "inline", onsubmit: (e) => e.preventDefault() },
      field("topic", topicInput), field("reset to", to), field("offset or time", arg),
      h("button", { type: "button", id: "reset-dry-run", onclick: () => send(false) }, "Dry run"),
      h("button", { type: "button", id: "reset-execute", class: "danger", onclick: () => send(true) }, "Execute")),
    out);
}

// -- transactions ---------------------------------------------------------------------

async function transactions(params) {
  const offset = Number(params.get("offset") || 0);
  const doc = await api(`/v1/console/transactions?limit=${PAGE}&offset=${offset}`);
  render(h("h1", {}, "Transactions and producers"),
    h("p", { class: "muted" }, "Ongoing transactions first, oldest first; a transaction open longer than its transaction.timeout.ms is hanging."),
    table(["transactional id", "producer id", "epoch", "state", "age", "timeout", "partitions"], doc.data.map((t) => h("tr", { class: t.hanging ? "hanging" : "" },
      h("td", {}, t.transactional_id, t.hanging ? h("span", { class: "badge critical" }, "hanging") : null),
      h("td", { class: "num" }, t.producer_id), h("td", { class: "num" }, t.producer_epoch), h("td", {}, t.state),
      h("td", { class: "num" }, duration(t.age_ms)), h("td", { class: "num" }, duration(t.timeout_ms)),
      h("td", {}, t.partitions.map((p) => `${p.topic}-${p.partition}`).join(", ")))), { id: "transactions" }),
    pager(doc, (o) => { location.hash = `#/transactions?offset=${o}`; }));
}

// -- SQL ------------------------------------------------------------------------------

// A query over the first topic there is, so the page's own example runs.
export function defaultQuery(names) {
  const t = names.find((n) => !n.startsWith("_"));
  if (!t) return null;
  return `SELECT partition, count(*) AS records, min("offset") AS first_offset, max("offset") AS last_offset\nFROM "${t.replaceAll('"', '""')}"\nGROUP BY partition\nORDER BY partition`;
}

const NUMERIC = /^(u?int\d+|float\d*|double|halffloat|decimal)/;

async function sqlPage(params) {
  const names = params.get("q") ? [] : await api("/topics");
  const example = params.get("q") || defaultQuery(names);
  const text = h("textarea", { id: "sql-query", rows: 5, placeholder: 'SELECT ... FROM "topic" ...' }, example || "");
  const out = h("div", { id: "sql-result" }, example ? null : h("p", { class: "muted" }, "no topics yet: create one on the Topics page"));
  const run = async (e) => {
    e.preventDefault();
    out.replaceChildren(h("p", { class: "muted" }, "running…"));
    try {
      const res = await api("/v1/console/sql", { method: "POST", body: { query: text.value, max_rows: 500 } });
      const numeric = res.types.map((t) => NUMERIC.test(t));
      out.replaceChildren(
        h("p", { class: "muted", id: "sql-summary" }, `${res.rows.length} rows${res.truncated ? " (more rows left out: at most 500 shown)" : ""} · ${res.engine}`),
        table(res.columns, res.rows.map((r) => h("tr", {}, r.map((v, i) => h("td", { class: numeric[i] ? "num" : null },
          typeof v === "object" && v !== null ? JSON.stringify(v) : v)))), { id: "sql-table" }));
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  render(h("h1", {}, "SQL"),
    h("p", { class: "muted" }, "Read-only SQL (Apache DataFusion) over the topics' Delta tables: ",
      h("code", {}, '"topic"'), " is its committed records (no transaction markers, no aborted records), ",
      h("code", {}, '"topic_all"'), " every row. Columns: partition, \"offset\", timestamp, key, value, headers, producer_id, producer_epoch, sequence, transactional, control, leader_epoch (quote offset, and names with capitals or dashes). Records not tiered yet are not in the tables."),
    h("form", { class: "stack", onsubmit: run }, text, h("button", { id: "sql-run" }, "Run")), out);
}

// -- sign in --------------------------------------------------------------------------

function signin() {
  const kind = h("select", { name: "kind" }, h("option", { value: "basic" }, "user and password (SASL/SCRAM, Basic)"), h("option", { value: "bearer" }, "OAuth bearer token"));
  const user = h("input", { name: "user", placeholder: "user", autocomplete: "username" });
  const secret = h("input", { name: "secret", type: "password", placeholder: "password or token", autocomplete: "current-password" });
  const who = credentials();
  render(h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, who ? `signed in (${who.kind === "bearer" ? "bearer token" : `User:${who.user}`}); credentials stay in this tab only` : "not signed in: requests go out anonymously"),
    h("form", { class: "stack", onsubmit: (e) => { e.preventDefault(); signIn(kind.value, user.value, secret.value); updateSignin(); location.hash = "#/overview"; } },
      kind, user, secret, h("button", {}, "Sign in")),
    who ? h("button", { onclick: () => { signOut(); updateSignin(); route(); } }, "Sign out") : null);
}

function updateSignin() {
  const who = credentials();
  document.getElementById("signin-link").textContent = who ? (who.kind === "bearer" ? "signed in (token)" : `User:${who.user}`) : "Sign in";
}

// -- routing --------------------------------------------------------------------------

async function route() {
  clearTimeout(refresh);
  const { parts, params } = query();
  const [page = "overview", arg] = parts;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === page);
  view.dataset.state = "loading";
  view.dataset.page = page;
  try {
    if (page === "topics" && arg) await topic(arg, params);
    else if (page === "topics") await topics(params);
    else if (page === "messages") await messages(params);
    else if (page === "groups" && arg) await group(arg, params);
    else if (page === "groups") await groups(params);
    else if (page === "transactions") await transactions(params);
    else if (page === "sql") await sqlPage(params);
    else if (page === "signin") signin();
    else await overview();
  } catch (err) {
    render(h("h1", {}, "Error"), errorBox(err));
    view.dataset.state = "error";
  }
}

window.addEventListener("hashchange", route);
updateSignin();
route();
