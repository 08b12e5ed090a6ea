// The wiremq console: every view is drawn from layout.json and the JSON API, nothing else.
// Views refresh themselves (layout.refresh_ms) without reloading the page.
"use strict";

const ROLES = ["viewer", "operator", "admin"];
const state = { layout: null, session: null, timer: null, eventsAfter: {}, page: null };
const PAGE_SIZE = 50;

// -- talking to the API ----------------------------------------------------------------------

async function api(method, url, body) {
  const headers = { "Accept": "application/json" };
  if (method !== "GET" && state.session) headers["X-CSRF-Token"] = state.session.csrf_token;
  const options = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(url, options);
  if (response.status === 401) { window.location.href = "/login"; throw new Error("log in"); }
  const text = await response.text();
  let document = null;
  try { document = text ? JSON.parse(text) : null; } catch (e) { document = { error: text }; }
  if (!response.ok) {
    const error = new Error((document && document.error) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return document;
}

// -- small helpers ---------------------------------------------------------------------------

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pick(object, path) {
  if (Array.isArray(path)) return path.map((p) => pick(object, p));
  let value = object;
  for (const key of String(path).split(".")) {
    if (value === null || value === undefined || typeof value !== "object" || !(key in value)) {
      return undefined;
    }
    value = value[key];
  }
  return value;
}

// The page's parameter as a row: {"name": "/queue/x"} on #/destination//queue/x.
function pageRow() {
  return state.page.param ? { [state.page.param]: state.page.value } : {};
}

// "{name}" from the row (or "{page.name}" from the page's parameter), percent-encoded in URLs.
function fill(template, row, encode) {
  return template.replace(/\{([\w.-]+)\}/g, (_, key) => {
    const value = key.startsWith("page.") ? state.page.value : pick(row, key);
    const text = value === undefined || value === null ? "" : String(value);
    return encode ? encodeURIComponent(text) : text;
  });
}

function allowed(role) {
  return !role || ROLES.indexOf(state.session.role) >= ROLES.indexOf(role);
}

function flash(text, bad) {
  const box = document.getElementById("flash");
  box.textContent = text;
  box.className = bad ? "flash bad" : "flash";
  box.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { box.hidden = true; }, 6000);
}

// -- formats ---------------------------------------------------------------------------------

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
const FORMATS = {
  count: (v) => Number(v).toLocaleString("en-US"),
  bytes: (v) => {
    let n = Number(v), i = 0;
    while (Math.abs(n) >= 1024 && i < UNITS.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(1) : n) + " " + UNITS[i];
  },
  duration: (v) => {
    let s = Math.floor(Number(v));
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    s %= 60;
    return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + s + "s";
  },
  limit: (v) => (v === -1 ? "none" : FORMATS.bytes(v)),
  percent: (v) => (Number(v) * 100).toFixed(1) + " %",
  rate: (v) => Number(v).toFixed(Number(v) >= 100 ? 0 : 1) + "/s",
  time: (v) => new Date(Number(v)).toISOString().replace("T", " ").replace("Z", ""),
  percent100: (v) => Number(v).toFixed(1) + " %",
  yesno: (v) => el("span", { class: v ? "yes" : "no" }, v ? "yes" : "no"),
  flag: (v) => (v ? "yes" : ""),
  bool: (v) => (v ? "yes" : "no"),
  tripped: (v) => (v ? el("span", { class: "tripped" }, "stopped") : "no"),
  list: (v) => (v && v.length ? v.join(", ") : "—"),
  pair: (v) => v.map((x) => (x === -1 ? "off" : FORMATS.count(x))).join(" / "),
  bytepair: (v) => v.map((x) => (x === -1 ? "off" : FORMATS.bytes(x))).join(" / "),
  watermarks: (v) => {
    const tripped = (v || []).filter((w) => w.tripped).map((w) => w.name);
    return tripped.length ? el("span", { class: "tripped" }, "stopped: " + tripped.join(", ")) : "flowing";
  },
  headers: (v) => el("span", { class: "body" },
    Object.entries(v || {}).map(([k, x]) => k + ":" + x).join("\n")),
  body: (v) => el("span", { class: "body" }, v),
};

function shown(value, format) {
  if (value === undefined || value === null) return "—";
  if (Array.isArray(value) && value.some((x) => x === undefined)) return "—";
  const formatter = FORMATS[format];
  if (formatter) return formatter(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// -- sections --------------------------------------------------------------------------------

const SECTIONS = {
  figures(section, data) {
    const items = section.items.filter((item) => pick(data, item.path) !== undefined);
    return el("div", { class: "figures" }, items.map((item) =>
      el("div", { class: "figure", "data-path": item.path },
        el("div", { class: "label" }, item.label),
        el("div", { class: "value" }, shown(pick(data, item.path), item.format)))));
  },

  table(section, data, node) {
    if (section.paged) return pagedTable(section, data, node);
    let rows = pick(data, section.rows);
    if (rows && !Array.isArray(rows)) {
      rows = Object.entries(rows).map(([key, row]) => ({ _key: key, ...row }));
    }
    return tableOf(section, rows || []);
  },

  actions(section, data) {
    const name = state.page.value || "";
    const kind = name.startsWith("/queue/") ? "queue" : "topic";
    const row = { ...(data || {}), ...pageRow() };
    return el("div", { class: "actions" }, section.actions
      .filter((a) => allowed(a.role) && (!a.kind || a.kind === kind) && applies(a, row))
      .map((a) => actionButton(a, row)));
  },

  chart(section, data, node) {
    return chartBox(section, node);
  },

  events(section, data, node) {
    return eventList(section, node);
  },

  parameters(section, data) {
    return parameterEditor(data);
  },

  wizard(section, data, node) {
    return wizardForm(node);
  },
};

// Whether an action applies to a row (or the page's data): "when" names a field that must be
// set (true, or any value), "unless" one that must not.
function applies(action, row) {
  const truthy = (path) => { const v = pick(row, path); return v !== undefined && v !== null && v !== false && v !== ""; };
  return (!action.when || truthy(action.when)) && (!action.unless || !truthy(action.unless));
}

function tableOf(section, rows) {
  if (!rows.length) return el("p", { class: "muted" }, section.empty || "none");
  const actions = (section.actions || []).filter((a) => allowed(a.role));
  const view = section.paged ? viewOf(section) : null;
  const head = el("tr", {}, section.columns.map((c) => {
    if (!view || !c.sort) return el("th", {}, c.label);
    const current = view.sort === c.sort;
    return el("th", { class: "sortable" + (current ? " sorted" : ""), "data-sort": c.sort,
      onclick: () => {
        view.order = current && view.order === "asc" ? "desc" : current ? "asc" : (c.sort === "name" ? "asc" : "desc");
        view.sort = c.sort;
        view.offset = 0;
        redraw(section);
      } }, c.label, current ? (view.order === "asc" ? " ▲" : " ▼") : "");
  }), actions.length ? el("th", {}, "") : null);
  const body = rows.map((row) => el("tr", {},
    section.columns.map((column) => {
      const value = pick(row, column.path);
      const cell = column.link && value !== undefined && value !== null
        ? el("a", { href: "#/" + column.link + "/" + encodeURIComponent(value) }, String(value))
        : shown(value, column.format);
      const numeric = ["count", "bytes", "rate"].includes(column.format);
      return el("td", { class: numeric ? "num" : null }, cell);
    }),
    actions.length ? el("td", {}, el("div", { class: "actions" },
      actions.filter((a) => applies(a, row)).map((a) => actionButton(a, row)))) : null));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

// -- paged tables: the API sorts, filters and pages; the page holds one page of rows ---------

function viewOf(section) {
  state.views = state.views || new Map();
  if (!state.views.has(section)) {
    state.views.set(section, { offset: 0, sort: section.sort || "name", order: section.order || "asc", filter: "" });
  }
  return state.views.get(section);
}

function pagedSource(section) {
  const view = viewOf(section);
  const source = fill(section.source, pageRow(), true);
  const query = new URLSearchParams({ offset: view.offset, limit: PAGE_SIZE });
  if (!section.filter) { query.set("sort", view.sort); query.set("order", view.order); }
  if (view.filter) query.set(section.filter || "filter", view.filter);
  return source + (source.includes("?") ? "&" : "?") + query.toString();
}

function pagedTable(section, data, node) {
  const view = viewOf(section);
  let box = node;
  if (!box || !box.classList.contains("paged")) {
    // A name filter applies as it is typed; a selector (section.filter) once entered, as
    // a half-typed one is no selector.
    const typed = () => { view.filter = filter.value.trim(); view.offset = 0; };
    const filter = el("input", { type: "search", class: "table-filter",
      placeholder: section.filterHint || "filter by name", value: view.filter,
      oninput: section.filter ? null : () => {
        typed();
        clearTimeout(filter.timer);
        filter.timer = setTimeout(() => redraw(section), 250);
      },
      onchange: section.filter ? () => { typed(); redraw(section); } : null });
    box = el("div", { class: "paged" }, filter, el("div", { class: "rows" }), el("div", { class: "pager" }));
  }
  const rows = data.destinations || pick(data, section.rows) || [];
  box.querySelector(".rows").replaceChildren(tableOf(section, rows));
  // The destinations' table knows how many matched; a browse only whether more follow.
  const counted = data.matched !== undefined;
  const first = rows.length ? data.offset + 1 : 0, last = data.offset + rows.length;
  const filtered = counted && data.matched !== data.total ? " (filtered from " + FORMATS.count(data.total) + ")" : "";
  const range = FORMATS.count(first) + "–" + FORMATS.count(last) +
    (counted ? " of " + FORMATS.count(data.matched) + filtered : data.more ? ", more follow" : ", the last");
  box.querySelector(".pager").replaceChildren(
    el("button", { type: "button", "data-page": "previous", disabled: data.offset <= 0,
      onclick: () => { view.offset = Math.max(0, view.offset - PAGE_SIZE); redraw(section); } }, "« Previous"),
    el("span", { class: "range" }, range),
    el("button", { type: "button", "data-page": "next", disabled: counted ? last >= data.matched : !data.more,
      onclick: () => { view.offset += PAGE_SIZE; redraw(section); } }, "Next »"));
  return box;
}

// Draw one section again now (after a sort, a filter, a page).
async function redraw(section) {
  const entry = (state.sections || []).find((s) => s.section === section);
  if (entry) await refreshSection(entry, {});
}

function actionButton(action, row) {
  return el("button", {
    type: "button",
    class: action.danger ? "danger" : null,
    "data-action": action.label,
    onclick: async () => {
      if (action.confirm && !window.confirm(fill(action.confirm, row, false))) return;
      let body;
      if (action.choose) {
        const answer = await Forms.chooseDestination(fill(action.choose.text, row, false),
          action.label);
        if (!answer) return;
        body = { [action.choose.field]: answer };
      }
      try {
        const result = await api(action.method, fill(action.url, row, true), body);
        if (action.show) { Forms.showMessage(result); return; }
        flash(action.label + ": " + summary(result));
        if (action.then) window.location.hash = action.then;
        else refresh(true);
      } catch (error) {
        flash(action.label + " failed: " + error.message, true);
      }
    },
  }, action.label);
}

function summary(result) {
  return Object.entries(result || {}).map(([k, v]) => k + " " + JSON.stringify(v)).join(", ");
}

// -- charts ----------------------------------------------------------------------------------

async function chartBox(section, node) {
  const box = node || el("div", { class: "chart" });
  const query = section.destination
    ? "?destination=" + encodeURIComponent(fill(section.destination, pageRow(), false)) : "";
  const history = await api("GET", "/api/history" + query);
  const series = section.series.filter((name) => history.series[name]);
  box.replaceChildren(
    drawChart(history.times, series.map((name) => history.series[name])),
    el("div", { class: "legend" }, series.map((name, i) => {
      const s = history.series[name];
      const last = s.values.length ? s.values[s.values.length - 1] : null;
      return el("span", {}, el("i", { class: "c" + (i % 6) }),
        s.label + " (" + s.unit + ")" + (last === null ? "" : ": " + Charts.short(last)));
    })));
  return box;
}

function drawChart(times, series) {
  return Charts.svg(times, series.map((s) => s.values));
}

// -- events ----------------------------------------------------------------------------------

async function eventList(section, node) {
  let box = node;
  if (!box) {
    box = el("div", {});
    if (section.filter) {
      box.append(el("input", { type: "search", placeholder: "filter (event, destination, …)",
        class: "event-filter", oninput: () => applyFilter(box) }));
    }
    box.append(el("div", { class: "events" }));
    state.eventsAfter[section.title] = undefined;
  }
  const list = box.querySelector(".events");
  const after = state.eventsAfter[section.title];
  const query = after === undefined ? "?limit=" + section.limit : "?after=" + after;
  const result = await api("GET", "/api/events" + query);
  for (const event of result.events) {
    const { id, event: name, level, timestamp, ...fields } = event;
    const text = (timestamp || "").replace("T", " ").slice(0, 19) + "  " + (level || "") +
      "  " + name + "  " + Object.entries(fields).map(([k, v]) => k + "=" + JSON.stringify(v)).join(" ");
    list.prepend(el("div", { class: level || "", "data-event": name }, text));
    state.eventsAfter[section.title] = id;
  }
  if (!result.events.length && state.eventsAfter[section.title] === undefined) {
    state.eventsAfter[section.title] = result.total;
  }
  while (list.children.length > section.limit) list.lastChild.remove();
  applyFilter(box);
  return box;
}

function applyFilter(box) {
  const input = box.querySelector(".event-filter");
  const words = input ? input.value.toLowerCase() : "";
  for (const line of box.querySelectorAll(".events div")) {
    line.hidden = words !== "" && !line.textContent.toLowerCase().includes(words);
  }
}

// -- parameters ------------------------------------------------------------------------------

function parameterEditor(data) {
  const canChange = allowed("admin");
  const groups = {};
  for (const p of data.parameters) (groups[p.group] = groups[p.group] || []).push(p);
  const filter = el("input", { type: "search", placeholder: "filter parameters",
    oninput: () => {
      const words = filter.value.toLowerCase();
      for (const row of wrapper.querySelectorAll("tr[data-key]")) {
        row.hidden = words !== "" && !row.textContent.toLowerCase().includes(words) &&
          !row.dataset.key.toLowerCase().includes(words);
      }
    } });
  const wrapper = el("div", {}, filter,
    el("p", { class: "muted" }, "Saved to " + data.config + ". Live parameters change at once; " +
      "the others at the next start."),
    Object.entries(groups).map(([group, params]) => el("div", {},
      el("h2", {}, group),
      el("table", {}, el("thead", {}, el("tr", {},
        ["Parameter", "Value", "Unit", "Default", "Allowed", "Changes", ""].map((t) => el("th", {}, t)))),
      el("tbody", {}, params.map((p) => parameterRow(p, canChange)))))));
  return wrapper;
}

function parameterRow(p, canChange) {
  const input = p.type === "boolean"
    ? el("select", { name: p.key }, ["true", "false"].map((v) =>
        el("option", { value: v, selected: String(p.configured) === v }, v)))
    : p.choices.length
      ? el("select", { name: p.key }, p.choices.map((v) =>
          el("option", { value: v, selected: p.configured === v }, v)))
      : el("input", { name: p.key, value: String(p.configured), size: 14 });
  input.disabled = !canChange;
  const message = el("div", { class: "error" });
  const save = el("button", { type: "button", "data-save": p.key, hidden: !canChange,
    onclick: async () => {
      let value = input.value;
      if (p.type === "boolean") value = value === "true";
      else if (p.type === "integer" && /^-?\d+$/.test(value.trim())) value = Number(value);
      else if (p.type === "number" && value.trim() !== "" && !isNaN(Number(value))) value = Number(value);
      try {
        const result = await api("PUT", "/api/parameters/" + encodeURIComponent(p.key), { value });
        message.textContent = "";
        flash(p.key + " = " + JSON.stringify(result.value) +
          (result.applied ? " (in force now)" : " (saved: in force after a restart)"));
        refresh(true);
      } catch (error) {
        message.textContent = error.message;
      }
    } }, "Save");
  const badge = p.live ? el("span", { class: "badge live" }, "at once")
    : el("span", { class: "badge restart" }, "on restart");
  const pending = [
    p.restart_needed ? el("div", { class: "muted" }, "in force: " + JSON.stringify(p.value)) : null,
    p.command_line ? el("div", { class: "muted" }, "given on the command line, which overrides config.xml") : null,
  ];
  return el("tr", { "data-key": p.key },
    el("td", { title: p.doc }, p.name, el("div", { class: "muted" }, p.doc)),
    el("td", {}, input, pending, message),
    el("td", {}, p.unit),
    el("td", {}, JSON.stringify(p.default)),
    el("td", {}, p.allowed),
    el("td", {}, badge),
    el("td", {}, save));
}

// -- the wizard ------------------------------------------------------------------------------

async function wizardForm(node) {
  if (node) return node;
  const form = await api("GET", "/api/wizard");
  const inputs = form.inputs.map((i) => el("input", { name: i.name, type: "number", min: 0,
    value: i.example, required: true }));
  const result = el("div", { id: "wizard-result" });
  const values = () => Object.fromEntries(inputs.map((i) => [i.name, Number(i.value)]));
  const show = (answer) => {
    result.replaceChildren(el("table", {},
      el("thead", {}, el("tr", {}, ["Parameter", "Value", "Why"].map((t) => el("th", {}, t)))),
      el("tbody", {}, answer.allocations.map((a) => el("tr", { "data-key": a.key },
        el("td", {}, a.key, a.parameter ? "" : el("div", { class: "muted" }, "not a parameter of this server")),
        el("td", { class: "num" }, FORMATS.count(a.value)),
        el("td", { class: "reason" }, a.reason))))));
  };
  const compute = el("button", { type: "button", class: "primary", id: "wizard-compute",
    onclick: async () => {
      try { show(await api("POST", "/api/wizard", values())); }
      catch (error) { result.replaceChildren(el("p", { class: "error" }, error.message)); }
    } }, "Compute");
  const apply = el("button", { type: "button", id: "wizard-apply", hidden: !allowed("admin"),
    onclick: async () => {
      if (!window.confirm("Save this allocation to config.xml?")) return;
      try {
        const answer = await api("POST", "/api/wizard/apply", values());
        show(answer);
        const live = answer.changed.filter((c) => c.applied).length;
        flash("Saved " + answer.changed.length + " values (" + live + " in force now, the others after a restart)");
      } catch (error) { flash("Wizard failed: " + error.message, true); }
    } }, "Save to config.xml");
  return el("div", {},
    el("form", { class: "wizard", onsubmit: (e) => e.preventDefault() },
      form.inputs.map((i, n) => [el("label", { for: i.name }, i.label), inputs[n]])),
    el("p", { class: "actions" }, compute, apply), result);
}

// -- pages -----------------------------------------------------------------------------------

function route() {
  const [id, ...rest] = window.location.hash.replace(/^#\/?/, "").split("/");
  const page = state.layout.pages.find((p) => p.id === id && allowed(p.role)) || state.layout.pages[0];
  const value = rest.length ? decodeURIComponent(rest.join("/")) : undefined;
  return { page, value };
}

async function show() {
  const { page, value } = route();
  state.page = { ...page, value };
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("current", link.dataset.page === (page.hidden ? parentOf(page) : page.id));
  }
  const main = document.getElementById("main");
  main.replaceChildren(el("h1", {}, page.param && value ? page.title + " " + value : page.title));
  main.dataset.page = page.id;
  state.sections = [];
  for (const section of page.sections) {
    if (!allowed(section.role)) continue;
    if (section.kind && !(value || "").startsWith("/" + section.kind + "/")) continue;
    const node = el("section", { "data-section": section.type, "data-title": section.title || "" },
      section.title ? el("h2", {}, fill(section.title, pageRow(), false)) : null,
      el("div", { class: "content" }));
    main.append(node);
    state.sections.push({ section, node });
  }
  await refresh(true);
  document.body.dataset.ready = page.id;
}

function parentOf(page) {
  return page.parent || "destinations";
}

async function refresh(all) {
  const cache = {};
  for (const entry of state.sections || []) {
    const { section } = entry;
    if (!all && section.refresh === false) continue;
    if (!all && ["parameters", "wizard", "form"].includes(section.type)) continue;
    await refreshSection(entry, cache);
  }
}

// Sections that keep what they drew (their inputs, their place) and update it.
const KEEPS = ["chart", "events", "wizard", "form", "table"];

async function refreshSection({ section, node }, cache) {
  const content = node.querySelector(".content");
  try {
    let data = null;
    if (section.source) {
      const url = section.paged ? pagedSource(section) : fill(section.source, pageRow(), true);
      data = cache[url] = cache[url] || (await api("GET", url));
    }
    const draw = SECTIONS[section.type];
    const existing = content.firstChild;
    const drawn = await draw(section, data, KEEPS.includes(section.type) ? existing : null);
    if (drawn !== existing) content.replaceChildren(drawn);
  } catch (error) {
    content.replaceChildren(el("p", { class: "error" }, error.message));
  }
}

async function start() {
  const [layout, session] = await Promise.all([
    fetch("/static/layout.json").then((r) => r.json()),
    api("GET", "/api/session"),
  ]);
  state.layout = layout;
  state.session = session;
  document.getElementById("nav").replaceChildren(...layout.pages
    .filter((p) => !p.hidden && allowed(p.role))
    .map((p) => el("a", { href: "#/" + p.id, "data-page": p.id }, p.title)));
  document.getElementById("who").textContent = session.open
    ? "open console (admin)" : session.user + " (" + session.role + ")";
  const note = document.getElementById("note");
  if (session.localhost_only) {
    note.textContent = "No users file: this console needs no login and listens on 127.0.0.1 only. " +
      "Add users with wiremq passwd NAME --role admin.";
    note.hidden = false;
  }
  const logout = document.getElementById("logout");
  logout.hidden = session.open;
  logout.addEventListener("click", async () => {
    await api("POST", "/logout");
    window.location.href = "/login";
  });
  window.addEventListener("hashchange", show);
  await show();
  state.timer = setInterval(() => refresh(false), layout.refresh_ms);
}

// Started once every script of the page has run (the section types of forms.js and the rest).
document.addEventListener("DOMContentLoaded", () => start().catch((error) => {
  document.getElementById("main").replaceChildren(el("p", { class: "error" }, error.message));
}));
