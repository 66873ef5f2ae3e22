// logport ui: draws each view from its JSON (/api/<view>?<the page's own query>), and the static report from the
// data written into it (window.LOGPORT_REPORT). Times are the lake's wall-clock minutes sent as epoch ms read as
// UTC, so ECharts draws them with useUTC and never shifts them by the browser's time zone.
"use strict";

const Q = new URLSearchParams(location.search);
const VIEW = document.body.dataset.view;
const REPORT = window.LOGPORT_REPORT || null;
const RANGE_KEYS = ["date", "from", "to"];
const STREAM_VIEWS = [["dashboard", "dashboard"], ["actions", "actions"], ["requests", "requests"],
  ["exceptions", "exceptions"], ["js_errors", "JS errors"], ["frontend", "frontend"],
  ["notifications", "notifications"], ["history", "history"]];
const SEVERITY = ["debug", "info", "warn", "error", "fatal", "unknown"];
const charts = [];

// --- small helpers ---

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  if (digits === undefined) digits = Math.abs(v) >= 100 || Number.isInteger(v) ? 0 : Math.abs(v) >= 10 ? 1 : 2;
  return v.toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
}
const msf = (v) => (v === null || v === undefined ? "–" : num(v, v >= 100 ? 0 : 1) + " ms");
// logjam floors apdex to two decimals
const apdexf = (v) => (v === null || v === undefined ? "–" : (Math.floor(v * 100) / 100).toFixed(2));
const pct = (v) => (v === null || v === undefined ? "–" : num(v, 2) + " %");

function rangeParams(source) {
  const out = {};
  for (const k of RANGE_KEYS) if (source.get(k)) out[k] = source.get(k);
  return out;
}

function streamParams() {
  return Q.get("app") && Q.get("env") ? {app: Q.get("app"), env: Q.get("env")} : {};
}

// a URL of the app (or, in the report, an anchor of the page)
function href(view, params, keepRange = true) {
  if (REPORT) return REPORT_LINKS[view] ? REPORT_LINKS[view](params) : null;
  const p = new URLSearchParams({...(keepRange ? rangeParams(Q) : {}), ...params});
  for (const [k, v] of [...p.entries()]) if (v === "" || v === "null" || v === "undefined") p.delete(k);
  return (view === "overview" ? "/" : "/" + view) + (p.toString() ? "?" + p : "");
}

function a(view, params, text, attrs) {
  const url = href(view, params);
  return url ? h("a", {href: url, ...(attrs || {})}, text) : h("span", attrs || {}, text);
}

function fmtTime(ms) {
  return new Date(ms).toISOString().slice(0, 16).replace("T", " ");
}

function toParam(ms) {
  return new Date(ms).toISOString().slice(0, 16);
}

// --- charts ---

function chartBox(id, height) {
  return h("div", {class: "chart", id, style: `height:${height || 260}px`});
}

function mount(box, option, after) {
  const draw = () => {
    const chart = echarts.init(box, null, {renderer: "canvas"});
    chart.setOption({useUTC: true, animation: false, ...option});
    charts.push(chart);
    if (after) after(chart);
  };
  if (box.isConnected) draw();
  else requestAnimationFrame(draw);
}

// a time chart: series of [time, value] with nulls drawn as gaps, event markers as vertical lines, and with
// `narrow` a brush along x whose selection reloads the page on that minute range
function timeChart(box, spec) {
  const axes = spec.axes || [{name: ""}];
  const series = spec.series.map((s, i) => ({
    name: s.name, type: s.type || "line", yAxisIndex: s.axis || 0, showSymbol: false, connectNulls: false,
    stack: s.stack, areaStyle: s.area ? {} : undefined, step: s.step, barMaxWidth: 12,
    data: spec.times.map((t, j) => [t, s.data[j] === undefined ? null : s.data[j]]),
    markLine: i === 0 && spec.markers && spec.markers.length ? {
      symbol: "none", silent: false, label: {formatter: (p) => p.data.label.split("\n")[0], fontSize: 10},
      lineStyle: {color: "#9333ea", type: "dashed"},
      data: spec.markers.map((m) => ({xAxis: m.time, label: m.label})),
    } : undefined,
  }));
  const option = {
    tooltip: {trigger: "axis", valueFormatter: (v) => (v === null ? "–" : num(v))},
    legend: {top: 0},
    grid: {left: 56, right: axes.length > 1 ? 56 : 20, top: 32, bottom: 56},
    xAxis: {type: "time", min: spec.min, max: spec.max,
            axisLabel: {hideOverlap: true, formatter: {year: "{yyyy}", month: "{MMM} {d}", day: "{MMM} {d}",
                                                        hour: "{HH}:{mm}", minute: "{HH}:{mm}"}}},
    yAxis: axes.map((ax, i) => ({type: "value", name: ax.name, min: ax.min, max: ax.max, position: i ? "right" : "left",
                                 splitLine: {show: i === 0}})),
    series,
    dataZoom: [{type: "slider", height: 18, bottom: 6}],
  };
  if (spec.narrow && !REPORT) {
    option.brush = {xAxisIndex: 0, brushType: "lineX", brushMode: "single", transformable: false,
                    throttleType: "debounce", throttleDelay: 200};
    option.toolbox = {show: false};
  }
  mount(box, option, (chart) => {
    if (!(spec.narrow && !REPORT)) return;
    chart.dispatchAction({type: "takeGlobalCursor", key: "brush",
                          brushOption: {brushType: "lineX", brushMode: "single"}});
    chart.on("brushEnd", (e) => {
      const area = e.areas && e.areas[0];
      if (!area || !area.coordRange) return;
      const step = (spec.interval || 1) * 60000;
      const lo = Math.floor(area.coordRange[0] / 60000) * 60000;
      const hi = Math.max(lo + 60000, Math.ceil(area.coordRange[1] / step) * step);
      spec.narrow(lo, hi);
    });
  });
}

function narrowTo(lo, hi) {
  const p = new URLSearchParams(location.search);
  for (const k of RANGE_KEYS) p.delete(k);
  p.set("from", toParam(lo));
  p.set("to", toParam(hi));
  p.delete("interval");
  location.href = location.pathname + "?" + p;
}

function barChart(box, labels, values, name, onClick) {
  mount(box, {
    tooltip: {trigger: "axis"}, grid: {left: 60, right: 20, top: 20, bottom: 40},
    xAxis: {type: "category", data: labels, axisLabel: {interval: 0, rotate: labels.length > 10 ? 30 : 0}},
    yAxis: {type: "value", name}, series: [{type: "bar", data: values, barMaxWidth: 24}],
  }, (chart) => { if (onClick) chart.on("click", (p) => onClick(p.dataIndex)); });
}

function heatmap(box, data) {
  const times = [...new Set(data.cells.map((c) => c[0]))].sort((x, y) => x - y);
  const index = new Map(times.map((t, i) => [t, i]));
  const max = Math.max(1, ...data.cells.map((c) => c[2]));
  mount(box, {
    tooltip: {formatter: (p) => `${fmtTime(times[p.data[0]])} · ≤ ${data.buckets[p.data[1]]} ms: ${p.data[2]}`},
    grid: {left: 60, right: 20, top: 10, bottom: 70},
    xAxis: {type: "category", data: times.map(fmtTime), axisLabel: {hideOverlap: true}},
    yAxis: {type: "category", data: data.buckets, name: "ms ≤"},
    visualMap: {min: 0, max, calculable: true, orient: "horizontal", left: "center", bottom: 0, itemHeight: 120,
                inRange: {color: ["#eef2ff", "#6366f1", "#b91c1c"]}},
    series: [{type: "heatmap", data: data.cells.map((c) => [index.get(c[0]), c[1], c[2]])}],
  });
}

function pie(box, entries, name) {
  mount(box, {
    tooltip: {trigger: "item", valueFormatter: (v) => num(v)},
    series: [{type: "pie", name, radius: ["35%", "70%"], data: entries.map(([k, v]) => ({name: k, value: v})),
              label: {formatter: "{b}: {d}%"}}],
  });
}

// --- tables ---

// columns: [label, key or fn(row), {num, sort}]; says when it is cut
function table(columns, rows, info, attrs) {
  const head = h("tr", {}, columns.map(([label, , opt]) => {
    const o = opt || {};
    const text = o.sortHref ? h("a", {href: o.sortHref, class: o.sorted ? "sorted" : null}, label) : label;
    return h("th", {class: o.num ? "num" : null}, text);
  }));
  const body = rows.map((row) => h("tr", row._attrs || {}, columns.map(([, key, opt]) => {
    const v = typeof key === "function" ? key(row) : row[key];
    return h("td", {class: opt && opt.num ? "num" : null}, v instanceof Node ? v : v === null || v === undefined ? "–" : v);
  })));
  const parts = [h("table", attrs || {}, h("thead", {}, head), h("tbody", {}, body))];
  if (!rows.length) parts.push(h("p", {class: "empty"}, "nothing in this range"));
  if (info && info.cut) parts.push(h("p", {class: "cut"}, `showing ${rows.length} of ${num(info.total)} rows`));
  return h("div", {class: "table"}, parts);
}

function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

function cards(items) {
  return h("div", {class: "cards"}, items.map(([label, value, cls]) =>
    h("div", {class: "card " + (cls || "")}, h("div", {class: "value"}, value), h("div", {class: "label"}, label))));
}

function apdexClass(v) {
  if (v === null || v === undefined) return "";
  return v >= 0.94 ? "good" : v >= 0.7 ? "fair" : "bad";
}

// --- page frame ---

function header(meta) {
  const top = document.getElementById("top");
  const stream = streamParams();
  const nav = [h("a", {href: href("overview", {}), class: "brand"}, "logport"), a("overview", {}, "overview")];
  if (stream.app) {
    nav.push(h("span", {class: "stream"}, `${stream.app}-${stream.env}`));
    for (const [view, label] of STREAM_VIEWS)
      nav.push(a(view, stream, label, {class: VIEW === view ? "current" : null}));
  }
  if (meta.log_dates && meta.log_dates.length) nav.push(a("logs", {}, "logs", {class: VIEW === "logs" ? "current" : null}));
  nav.push(a("live", {}, "live", {class: VIEW === "live" ? "current" : null}, false));
  const picker = h("form", {class: "range", onsubmit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams(location.search);
    for (const k of RANGE_KEYS) p.delete(k);
    const f = e.target;
    if (f.elements.from.value || f.elements.to.value) {
      if (f.elements.from.value) p.set("from", f.elements.from.value);
      if (f.elements.to.value) p.set("to", f.elements.to.value);
    } else if (f.elements.date.value) p.set("date", f.elements.date.value);
    location.href = location.pathname + "?" + p;
  }},
  h("label", {}, "day ", h("select", {name: "date"}, h("option", {value: ""}, "latest"),
    (meta.dates || []).map((d) => h("option", {value: d, selected: Q.get("date") === d}, d)))),
  h("label", {}, " from ", h("input", {name: "from", value: Q.get("from") || "", placeholder: "YYYY-MM-DD[THH:MM]", size: 16})),
  h("label", {}, " to ", h("input", {name: "to", value: Q.get("to") || "", placeholder: "YYYY-MM-DD[THH:MM]", size: 16})),
  h("button", {type: "submit"}, "show"));
  top.replaceChildren(h("nav", {}, nav), VIEW === "live" ? "" : picker);
}

function rangeText(range) {
  if (!range) return "";
  if (range.date) return range.date;
  return `${range.from.replace("T", " ")} – ${range.to.replace("T", " ")}`;
}

async function api(view, extra) {
  const p = new URLSearchParams(location.search);
  for (const [k, v] of Object.entries(extra || {})) p.set(k, v);
  const response = await fetch(`/api/${view}?${p}`, {headers: {Accept: "application/json"}});
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || body.detail && JSON.stringify(body.detail) || response.statusText);
  return body;
}

// where show() draws: the page's main element, or in the report the section being written
let target = null;

function show(title, ...children) {
  if (!target) document.title = `${title} · logport`;
  (target || document.getElementById("main")).replaceChildren(h("h1", {}, title), ...children);
}

// --- the views ---

const VIEWS = {};

VIEWS.overview = (d) => {
  const rows = d.streams.map((s) => ({...s, _attrs: {"data-stream": `${s.app}-${s.env}`}}));
  show(`overview · ${rangeText(d.range)}`, section("app-envs, worst apdex first", table([
    ["app-env", (s) => a("dashboard", {app: s.app, env: s.env}, `${s.app}-${s.env}`)],
    ["requests", (s) => num(s.count), {num: true}],
    ["apdex", (s) => h("span", {class: apdexClass(s.apdex)}, apdexf(s.apdex)), {num: true}],
    ["papdex", (s) => apdexf(s.papdex), {num: true}], ["xapdex", (s) => apdexf(s.xapdex), {num: true}],
    ["p50", (s) => msf(s.p50), {num: true}], ["p95", (s) => msf(s.p95), {num: true}],
    ["errors", (s) => a("requests", {app: s.app, env: s.env, reason: "error"}, num(s.errors)), {num: true}],
    ["5xx", (s) => a("requests", {app: s.app, env: s.env, code: "5xx"}, num(s["5xx"])), {num: true}],
    ["error rate", (s) => pct(s.error_rate), {num: true}],
    ["exceptions", (s) => a("exceptions", {app: s.app, env: s.env}, num(s.exceptions)), {num: true}],
  ], rows, null, {id: "overview"})), d.logs ? h("p", {}, a("logs", {}, "log volume and message patterns →")) : "");
};

function rankingTable(d, stream, sortable) {
  const sortHref = (sort) => {
    if (!sortable) return null;
    const p = new URLSearchParams(location.search);
    p.set("sort", sort);
    p.set("order", d.sort === sort && d.descending ? "asc" : "desc");
    return "?" + p;
  };
  const col = (label, key, fn) => [label, fn || ((r) => num(r[key])), {num: true, sortHref: sortHref(key), sorted: d.sort === key}];
  const unit = d.resource.endsWith("_time") ? msf : (v) => num(v);
  const rows = d.rows.map((r) => ({...r, _attrs: {"data-page": r.page}}));
  return table([
    [d.group === "module" ? "module" : "action", (r) => d.group === "module"
      ? a("actions", {...stream, module: r.page, group: "action", sort: d.sort}, r.page)
      : a("action", {...stream, page: r.page}, r.page, {class: "page"})],
    col("count", "count", (r) => h("span", {"data-count": r.count}, num(r.count))),
    col("sum", "sum", (r) => unit(r.sum)), col("avg", "avg", (r) => unit(r.avg)),
    col("stddev", "stddev", (r) => unit(r.stddev)), col("max", "max", (r) => unit(r.max)),
    col("apdex", "apdex", (r) => h("span", {class: apdexClass(r.apdex)}, apdexf(r.apdex))),
    col("errors", "errors", (r) => a("requests", {...stream, page: r.page, reason: "error"}, num(r.errors))),
    ["share", (r) => h("span", {class: "bar", style: `--w:${Math.round((r.share || 0) * 100)}%`}, pct((r.share || 0) * 100)), {num: true}],
  ], rows, d, {id: "ranking"});
}

function seriesCharts(series, markers, prefix) {
  const boxes = [chartBox(prefix + "requests", 220), chartBox(prefix + "latency", 220), chartBox(prefix + "errors", 200)];
  const bounds = {min: series.times[0], max: series.times[series.times.length - 1] + series.interval * 60000};
  const narrow = prefix === "chart-" ? narrowTo : null;
  timeChart(boxes[0], {...bounds, times: series.times, markers, narrow, interval: series.interval,
    axes: [{name: "req/min"}, {name: "apdex", min: 0, max: 1}],
    series: [{name: "requests per minute", data: series.requests, type: "bar"},
             {name: "apdex", data: series.apdex, axis: 1}]});
  timeChart(boxes[1], {...bounds, times: series.times, markers, narrow, interval: series.interval, axes: [{name: "ms"}],
    series: [{name: "p50", data: series.p50}, {name: "p95", data: series.p95}, {name: "p99", data: series.p99},
             {name: "avg", data: series.avg}]});
  timeChart(boxes[2], {...bounds, times: series.times, markers, narrow, interval: series.interval, axes: [{name: "per minute"}],
    series: [{name: "4xx", data: series["4xx"]}, {name: "5xx", data: series["5xx"]},
             {name: "exceptions", data: series.exceptions}]});
  return boxes;
}

function summaryCards(s, stream) {
  const ap = s.apdex.apdex;
  const share = (n) => (ap.count ? pct((100 * n) / ap.count) : "–");
  return cards([
    ["requests", num(s.count)], ["apdex", apdexf(ap.score), apdexClass(ap.score)],
    ["happy / satisfied", `${share(ap.happy)} / ${share(ap.satisfied)}`],
    ["tolerating / frustrated", `${share(ap.tolerating)} / ${share(ap.frustrated)}`],
    ["p50 / p95 / p99", `${msf(s.percentiles.p50)} / ${msf(s.percentiles.p95)} / ${msf(s.percentiles.p99)}`],
    ["errors", a("requests", {...stream, reason: "error"}, num(s.problems.errors))],
    ["warnings", a("requests", {...stream, reason: "warning"}, num(s.problems.warnings))],
    ["exceptions", a("exceptions", stream, `${num(s.problems.exceptions)} + ${num(s.problems.soft_exceptions)} soft`)],
    ["response", h("span", {}, Object.entries(s.classes).map(([k, v]) =>
      h("span", {class: "code"}, a("requests", {...stream, code: k}, `${k} ${num(v)}`), " ")))],
  ]);
}

function resourceTables(s, stream) {
  const out = [];
  for (const [group, rows] of Object.entries(s.resources)) {
    const unit = group === "time" || group === "frontend" ? msf : (v) => num(v);
    out.push(section(`${group} resources`, table([
      ["resource", "resource"], ["avg", (r) => unit(r.avg), {num: true}], ["stddev", (r) => unit(r.stddev), {num: true}],
      ["max", (r) => unit(r.max), {num: true}], ["sum", (r) => unit(r.sum), {num: true}],
      ...(stream ? [["rank by it", (r) => a("actions", {...stream, resource: r.resource}, "actions →")]] : []),
    ], rows)));
  }
  return out;
}

VIEWS.dashboard = (d) => {
  const stream = {app: d.stream.app, env: d.stream.env};
  const s = d.summary;
  const breakdown = chartBox("chart-breakdown", 240);
  const times = (s.resources.time || []).filter((r) => r.resource !== "total_time" && r.avg);
  show(`${stream.app}-${stream.env} · ${rangeText(d.range)}`,
    h("p", {class: "hint"}, "drag across a chart to narrow the page to those minutes"),
    summaryCards(s, stream), ...seriesCharts(d.series, d.notifications, "chart-"),
    section("where the time goes (avg per request)", breakdown),
    section(h("span", {}, "actions by time spent · ", a("actions", stream, "all actions →"), " · ",
      a("actions", {...stream, group: "module"}, "by module →"), " · ", a("action", {...stream, page: "all_pages"}, "all pages →")),
    rankingTable(d.actions, stream, false)));
  pie(breakdown, times.map((r) => [r.resource, r.avg]), "avg ms");
};

VIEWS.actions = (d) => {
  const stream = streamParams();
  const title = d.module ? `actions of ${d.module}` : d.group === "module" ? "modules" : "actions";
  const resources = Object.values(META.resources || {}).flat();
  const pick = h("select", {onchange: (e) => { const p = new URLSearchParams(location.search); p.set("resource", e.target.value); location.href = "?" + p; }},
    resources.map((r) => h("option", {value: r, selected: r === d.resource}, r)));
  show(`${title} · ${stream.app}-${stream.env} · ${rangeText(d.range)}`,
    h("p", {}, "ranked by ", h("b", {}, `${d.sort} of `), pick, " · ",
      d.group === "module" ? a("actions", {...stream, group: "action"}, "by action") : a("actions", {...stream, group: "module"}, "by module")),
    rankingTable(d, stream, true));
};

VIEWS.action = (d) => {
  const stream = {app: d.stream.app, env: d.stream.env};
  const s = d.summary;
  const heat = chartBox("chart-heatmap", 320);
  const codes = chartBox("chart-codes", 200);
  const dist = Object.entries(d.distribution.kinds).flatMap(([kind, byResource]) =>
    Object.entries(byResource).map(([resource, points]) => [kind, resource, points]));
  const distBoxes = dist.map(([kind, resource]) => chartBox(`chart-dist-${kind}-${resource}`, 180));
  const stored = d.stored;
  show(`${d.page} · ${stream.app}-${stream.env} · ${rangeText(d.range)}`,
    summaryCards(s, {...stream, page: d.page}),
    h("p", {class: "stored"}, "stored requests: ", Object.entries(stored).filter(([, n]) => n).map(([reason, n]) =>
      h("span", {class: "code"}, a("requests", {...stream, page: d.page, reason}, `${reason} ${num(n)}`, {"data-reason": reason}), " "))),
    ...seriesCharts(d.series, [], "action-"),
    section("heatmap of total_time", heat),
    section("response codes", codes),
    section("distribution (logjam buckets)" + (d.distribution.note ? ` · ${d.distribution.note}` : ""),
      dist.length ? distBoxes : h("p", {class: "empty"}, "no quants for this page in these days")),
    ...resourceTables(s, null),
    section("exceptions", table([["exception", (r) => a("requests", {...stream, page: d.page, exception: r.name}, r.name)],
      ["requests", (r) => num(r.count), {num: true}]], s.exceptions.rows, s.exceptions)),
    section("callers", table([["caller", "name"], ["calls", (r) => num(r.count), {num: true}]], s.callers.rows, s.callers)),
    section("senders", table([["sender", "name"], ["messages", (r) => num(r.count), {num: true}]], s.senders.rows, s.senders)));
  heatmap(heat, d.heatmap);
  const codeList = Object.entries(s.response);
  barChart(codes, codeList.map(([c]) => c), codeList.map(([, n]) => n), "requests",
    (i) => { const url = href("requests", {...stream, page: d.page, code: codeList[i][0]}); if (url) location.href = url; });
  dist.forEach(([kind, resource, points], i) =>
    barChart(distBoxes[i], points.map((p) => `≤ ${num(p[0])}`), points.map((p) => p[1]), `${resource} (${kind})`));
};

VIEWS.requests = (d) => {
  const stream = streamParams();
  const filters = ["page", "reason", "code", "exception", "severity"].filter((k) => Q.get(k)).map((k) => `${k} ${Q.get(k)}`);
  const rows = d.rows.map((r) => ({...r, _attrs: {"data-id": r.id}}));
  show(`requests · ${stream.app}-${stream.env}${filters.length ? " · " + filters.join(", ") : ""}`,
    h("p", {}, "sorted by ", Q.get("sort") === "time" ? a("requests", {...Object.fromEntries(Q), sort: "total_time"}, "time (newest first) · by total_time")
      : a("requests", {...Object.fromEntries(Q), sort: "time"}, "total_time · newest first instead")),
    table([
      ["started", (r) => a("request", {...stream, date: r.date, id: r.id}, r.started_at ? r.started_at.replace("T", " ").slice(0, 23) : "–", {class: "request"}), {}],
      ["action", "page"], ["code", "response_code", {num: true}], ["severity", (r) => SEVERITY[r.severity] || r.severity],
      ["total_time", (r) => msf(r.total_time), {num: true}], ["reasons", (r) => (r.reasons || []).join(" ")],
      ["exceptions", (r) => (r.exceptions || []).join(", ")], ["description", "description"],
    ], rows, d, {id: "requests"}),
    d.cut && !REPORT ? h("p", {}, a("requests", {...Object.fromEntries(Q), offset: (d.offset || 0) + d.rows.length}, "next page →")) : "");
};

VIEWS.request = (d) => {
  const r = d.request;
  const stream = streamParams();
  const lines = h("div", {class: "lines", id: "log-lines"}, (r.lines || []).map((l) =>
    h("div", {class: `line sev${l.severity}`}, h("span", {class: "sev"}, SEVERITY[l.severity] || l.severity), " ",
      h("span", {class: "t"}, (l.time || "").slice(11, 23)), " ", l.text)));
  const metrics = Object.entries(d.metrics).map(([group, rows]) => section(`${group}`,
    table([["resource", "resource"], ["value", (m) => num(m.value), {num: true}]], rows)));
  const raw = d.raw;
  show(`${r.page} · ${r.started_at || ""}`,
    cards([["total_time", msf(r.total_time)], ["code", r.response_code], ["severity", SEVERITY[r.severity] || r.severity],
      ["request id", r.request_id || "–"], ["reasons", (r.reasons || []).join(" ")]]),
    h("p", {}, a("action", {...stream, page: r.page, date: r.date}, `${r.page} →`), " ",
      r.caller_action ? `called by ${r.caller_action} (${r.caller_id})` : ""),
    section("log lines", lines),
    ...metrics,
    section("exceptions", h("p", {}, [...(r.exceptions || []), ...(r.soft_exceptions || []).map((x) => x + " (soft)")].join(", ") || "none")),
    section("raw event", h("p", {}, `hub ${raw.hub}, segment ${raw.segment}, offset ${raw.offset}, entry ${raw.index}`),
      h("pre", {class: "command"}, raw.command)),
    d.js_errors.length ? section("JavaScript errors", table([["at", "started_at"], ["description", "description"], ["agent", "user_agent"]], d.js_errors)) : "",
    section("request", h("pre", {class: "fields"}, JSON.stringify({url: r.url, host: r.host, user_agent: r.user_agent, fields: d.fields}, null, 2))));
};

VIEWS.exceptions = (d) => {
  const stream = streamParams();
  const parts = [];
  for (const [kind, label] of [["exceptions", "exceptions"], ["soft_exceptions", "soft exceptions"]]) {
    const data = d[kind];
    const box = chartBox(`chart-${kind}`, 220);
    parts.push(section(label, box, table([["name", (r) => a("requests", {...stream, exception: r.name}, r.name)],
      ["requests", (r) => num(r.count), {num: true}]], data.rows, data)));
    const names = Object.keys(data.series);
    timeChart(box, {times: data.times, narrow: narrowTo, interval: d.interval, axes: [{name: "requests"}],
      series: names.map((n) => ({name: n, data: data.series[n], type: "bar", stack: "x"}))});
  }
  show(`exceptions · ${stream.app}-${stream.env} · ${rangeText(d.range)}`, ...parts);
};

VIEWS.js_errors = (d) => {
  const stream = streamParams();
  show(`JavaScript errors · ${stream.app}-${stream.env}`,
    section("by description", table([["description", "name"], ["count", (r) => num(r.count), {num: true}]], d.descriptions.rows, d.descriptions)),
    section("latest", table([["at", "started_at"], ["page", "page"], ["description", "description"],
      ["request", (r) => (r.request_id ? a("request", {...stream, date: r.date, id: r.request_id}, "request →") : "–")],
      ["agent", "user_agent"]], d.rows, d)));
};

VIEWS.frontend = (d) => {
  const stream = streamParams();
  const s = d.series;
  const boxes = [chartBox("chart-fapdex", 220), chartBox("chart-ftime", 220)];
  show(`frontend · ${stream.app}-${stream.env} · ${rangeText(d.range)}`,
    cards(Object.entries(d.apdex).map(([k, v]) => [`${k} (${num(v.count)})`, apdexf(v.score), apdexClass(v.score)])),
    ...boxes,
    section("frontend resources", table([["resource", "resource"], ["avg", (r) => msf(r.avg), {num: true}],
      ["stddev", (r) => msf(r.stddev), {num: true}], ["max", (r) => msf(r.max), {num: true}]], d.frontend)),
    section("pages by page_time spent", rankingTable(d.pages, stream, false)),
    section("user agents", table([["agent", "user_agent"], ["backend", (r) => num(r.backend), {num: true}],
      ["frontend", (r) => num(r.frontend), {num: true}], ["dropped", (r) => num(r.dropped), {num: true}]], d.agents)));
  timeChart(boxes[0], {times: s.times, narrow: narrowTo, interval: s.interval, axes: [{name: "apdex", min: 0, max: 1}, {name: "per minute"}],
    series: [{name: "fapdex", data: s.fapdex}, {name: "papdex", data: s.papdex}, {name: "xapdex", data: s.xapdex},
             {name: "pages/min", data: s.page_count, axis: 1, type: "bar"}, {name: "ajax/min", data: s.ajax_count, axis: 1, type: "bar"}]});
  timeChart(boxes[1], {times: s.times, narrow: narrowTo, interval: s.interval, axes: [{name: "ms"}],
    series: [{name: "page p50", data: s.page_time_p50}, {name: "page p95", data: s.page_time_p95},
             {name: "ajax p50", data: s.ajax_time_p50}, {name: "ajax p95", data: s.ajax_time_p95}]});
};

VIEWS.notifications = (d) => {
  show("notifications", table([["at", "started_at"], ["app-env", (r) => `${r.app}-${r.env}`], ["label", "label"],
    ["host", "host"], ["cluster", "cluster"], ["uuid", "uuid"]], d.rows, null, {id: "notifications"}));
};

VIEWS.history = (d) => {
  const stream = streamParams();
  const box = chartBox("chart-history", 240);
  show(`history · ${stream.app}-${stream.env}`, box, table([
    ["day", (r) => a("dashboard", {...stream, date: r.date}, r.date)], ["requests", (r) => num(r.count), {num: true}],
    ["apdex", (r) => apdexf(r.apdex), {num: true}], ["papdex", (r) => apdexf(r.papdex), {num: true}],
    ["xapdex", (r) => apdexf(r.xapdex), {num: true}], ["errors", (r) => num(r.errors), {num: true}],
    ["warnings", (r) => num(r.warnings), {num: true}], ["exceptions", (r) => num(r.exceptions), {num: true}],
    ["5xx", (r) => num(r["5xx"]), {num: true}], ["availability", (r) => pct(r.availability), {num: true}],
    ["p95", (r) => msf(r.p95), {num: true}],
    ...d.resources.map((name) => [name, (r) => msf(r.avg[name]), {num: true}]),
  ], d.rows, null, {id: "history"}));
  const times = d.rows.map((r) => r.time);
  timeChart(box, {times, axes: [{name: "requests"}, {name: "apdex", min: 0, max: 1}],
    series: [{name: "requests", data: d.rows.map((r) => r.count), type: "bar"},
             {name: "apdex", data: d.rows.map((r) => r.apdex), axis: 1}]});
};

VIEWS.logs = (d) => {
  const box = chartBox("chart-logs", 240);
  const filter = (column, name) => a("logs", {...Object.fromEntries(Q), [column]: name}, name || "–");
  show(`logs · ${rangeText(d.range)}` + Object.entries(d.filters).filter(([, v]) => v).map(([k, v]) => ` · ${k} ${v}`).join(""),
    box,
    h("div", {class: "cols"}, ["tag", "host", "level"].map((column) => section(`by ${column}`,
      table([[column, (r) => filter(column, r.name)], ["events", (r) => num(r.events), {num: true}],
        ["bytes", (r) => num(r.bytes), {num: true}]], d.by[column] || [])))),
    section("message patterns, new and growing first", table([
      ["", (r) => (r.new ? h("span", {class: "new"}, "new") : r.growth && r.growth > 1.5 ? h("span", {class: "grow"}, `×${num(r.growth, 1)}`) : "")],
      ["template", (r) => h("code", {}, r.template || r.pattern_id)], ["count", (r) => num(r.count), {num: true}],
      ["before", (r) => num(r.before), {num: true}], ["level", "level"], ["tag", "tag"], ["first seen", (r) => (r.first_seen || "").slice(0, 16)],
      ["sample", (r) => (r.samples[0] ? h("span", {title: `${r.samples[0].segment} @ ${r.samples[0].offset}`}, r.samples[0].message) : "–")],
    ], d.patterns.rows, d.patterns, {id: "patterns"})));
  const levels = Object.keys(d.levels);
  timeChart(box, {times: d.times, narrow: narrowTo, interval: d.interval, axes: [{name: "events"}],
    series: levels.map((lv) => ({name: lv, data: d.levels[lv], type: "bar", stack: "lv"}))});
};

VIEWS.live = async () => {
  const state = await api("live");
  const body = h("tbody", {});
  const row = (item) => h("tr", {class: item.error ? "error" : "", "data-kind": item.kind, "data-request-id": item.request_id || ""},
    h("td", {}, (item.time || "").slice(0, 23).replace("T", " ")),
    h("td", {}, item.kind === "request" ? item.app_env : item.tag),
    h("td", {}, item.kind === "request" ? item.page : item.level || ""),
    h("td", {class: "num"}, item.kind === "request" ? String(item.code ?? "") : ""),
    h("td", {class: "num"}, item.kind === "request" ? msf(item.total_time) : ""),
    h("td", {}, item.kind === "request" ? (item.exceptions || []).join(", ") || item.request_id || "" : item.message || ""));
  for (const item of state.items.slice().reverse()) body.append(row(item));
  const hubs = Object.entries(state.hubs);
  show("live", h("p", {id: "live-state"}, hubs.length ? hubs.map(([hub, st]) => `${hub}: ${st}`).join(" · ")
    : "no hub to follow: start `logport ui --server HOST:PORT`"),
  h("table", {id: "live"}, h("thead", {}, h("tr", {}, ["time", "app-env / tag", "action / level", "code", "total_time", "detail"].map((c) => h("th", {}, c)))), body));
  const source = new EventSource("/api/live/events");
  source.onopen = () => { document.body.dataset.live = "open"; };
  source.onmessage = (e) => {
    body.prepend(row(JSON.parse(e.data)));
    while (body.children.length > 500) body.lastChild.remove();
  };
};

// --- the static report (report.py writes the data): the same views, one section per app-env ---

const REPORT_LINKS = {dashboard: (p) => `#${p.app}-${p.env}`, overview: () => "#overview"};

function renderReport() {
  const r = REPORT;
  const main = document.getElementById("main");
  document.getElementById("top").replaceChildren(h("nav", {}, h("span", {class: "brand"}, "logport report"),
    h("a", {href: "#overview"}, "overview"), r.sections.map((s) => h("a", {href: `#${s.stream.app}-${s.stream.env}`}, `${s.stream.app}-${s.stream.env}`))));
  main.replaceChildren();
  const render = (fn, data, id) => {
    target = h("div", {id, class: "report-section"});
    main.append(target);
    fn(data);
    target = null;
  };
  render(VIEWS.overview, r.overview, "overview");
  for (const s of r.sections) render(VIEWS.dashboard, s, `${s.stream.app}-${s.stream.env}`);
  main.append(h("p", {class: "hint"}, `written ${r.written} from ${r.lake}`));
}

// --- start ---

let META = {};

async function start() {
  window.addEventListener("resize", () => charts.forEach((c) => c.resize()));
  if (REPORT) {
    META = REPORT.meta;
    renderReport();
    return;
  }
  try {
    META = await (await fetch("/api/meta")).json();
    header(META);
    if (VIEW === "live") return await VIEWS.live();
    const data = await api(VIEW);
    VIEWS[VIEW](data);
  } catch (e) {
    show("cannot show this view", h("p", {class: "error", id: "error"}, String(e.message || e)));
  }
}

start();
