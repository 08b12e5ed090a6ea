// The console's forms: choosing a destination (a search of the API's table, not a prompt),
// publishing a test message, making a destination with its parameters. Each is a section
// type of layout.json, or a dialog an action opens.
"use strict";

const Forms = (() => {
  // A dialog listing the destinations whose names contain what is typed (one page of the
  // API's table: a server with thousands answers with twenty); resolves to the name chosen,
  // or null.
  function chooseDestination(title, verb) {
    return new Promise((resolve) => {
      let chosen = null;
      const list = el("div", { class: "choices", id: "choose-list" });
      const picked = el("p", { class: "muted", id: "choose-picked" }, "none chosen");
      const confirm = el("button", { type: "button", class: "primary", "data-action": "confirm",
        disabled: true, onclick: () => close(chosen) }, verb);
      const search = el("input", { type: "search", id: "choose-filter", placeholder: "search destinations",
        oninput: () => { clearTimeout(search.timer); search.timer = setTimeout(find, 200); } });
      const overlay = el("div", { class: "overlay" }, el("div", { class: "dialog", role: "dialog" },
        el("h2", {}, title), search, list, picked,
        el("p", { class: "actions" }, confirm,
          el("button", { type: "button", "data-action": "cancel", onclick: () => close(null) }, "Cancel"))));
      function close(answer) {
        overlay.remove();
        resolve(answer);
      }
      async function find() {
        const words = search.value.trim();
        try {
          const page = await api("GET", "/api/destinations?limit=20&filter=" + encodeURIComponent(words));
          const names = page.destinations.map((d) => d.name);
          const typed = /^\/(queue|topic)\/./.test(words) && !names.includes(words) ? [words] : [];
          list.replaceChildren(...[...names, ...typed].map((name) => el("button", {
            type: "button", class: "choice", "data-destination": name,
            onclick: () => {
              chosen = name;
              picked.textContent = verb + " to " + name;
              confirm.disabled = false;
              for (const b of list.children) b.classList.toggle("chosen", b.dataset.destination === name);
            } }, name, typed.includes(name) ? " (new)" : "")));
          if (!names.length && !typed.length) list.replaceChildren(el("p", { class: "muted" }, "no destination matches"));
        } catch (error) {
          list.replaceChildren(el("p", { class: "error" }, error.message));
        }
      }
      document.body.append(overlay);
      search.focus();
      find();
    });
  }

  // "name: value" lines as headers.
  function headersOf(text) {
    const headers = {};
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      const at = line.indexOf(":");
      if (at <= 0) throw new Error("a header line is name: value, not " + JSON.stringify(line));
      headers[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    return headers;
  }

  function publish(section) {
    const name = state.page.value;
    const headers = el("textarea", { name: "headers", rows: 3, placeholder: "color: red\npriority: 9" });
    const body = el("textarea", { name: "body", rows: 4, placeholder: "the body (text)" });
    const persistent = el("input", { type: "checkbox", name: "persistent" });
    const result = el("div", { class: "form-result" });
    const send = el("button", { type: "button", class: "primary", "data-action": "publish",
      onclick: async () => {
        try {
          const answer = await api("POST", "/api/destinations/" + encodeURIComponent(name) + "/messages",
            { body: body.value, headers: headersOf(headers.value), persistent: persistent.checked });
          result.replaceChildren(el("p", { class: "ok" }, "Published ",
            el("a", { href: "#/story/" + encodeURIComponent(answer.message_id) }, answer.message_id),
            answer.persistent ? " (stored)" : ""));
          refresh(true);
        } catch (error) {
          result.replaceChildren(el("p", { class: "error" }, error.message));
        }
      } }, "Publish");
    return el("form", { class: "stacked", onsubmit: (e) => e.preventDefault() },
      el("label", {}, "Headers (one name: value a line)", headers),
      el("label", {}, "Body", body),
      el("label", { class: "inline" }, persistent, " persistent (stored before it is answered)"),
      el("p", { class: "actions" }, send), result);
  }

  async function create(section) {
    const parameters = (await api("GET", "/api/parameters?group=Destination")).parameters
      .filter((p) => p.name !== "declared");
    const name = el("input", { name: "name", placeholder: "/queue/NAME or /topic/NAME", size: 40 });
    const inputs = parameters.map((p) => {
      const input = p.type === "boolean" || p.choices.length
        ? el("select", { name: p.name }, (p.choices.length ? p.choices : ["true", "false"]).map((v) =>
            el("option", { value: String(v), selected: String(p.value) === String(v) }, String(v))))
        : el("input", { name: p.name, value: String(p.value), size: 14 });
      return { p, input };
    });
    const result = el("div", { class: "form-result" });
    const make = el("button", { type: "button", class: "primary", "data-action": "create",
      onclick: async () => {
        const chosen = {};
        for (const { p, input } of inputs) {
          if (input.value === String(p.value)) continue;  // as the default: not the destination's own
          chosen[p.name] = typed(p, input.value);
        }
        try {
          const answer = await api("POST", "/api/destinations", { name: name.value.trim(), parameters: chosen });
          flash("Made " + answer.destination);
          window.location.hash = "#/destination/" + encodeURIComponent(answer.destination);
        } catch (error) {
          result.replaceChildren(el("p", { class: "error" }, error.message));
        }
      } }, "Create");
    return el("form", { class: "stacked", onsubmit: (e) => e.preventDefault() },
      el("label", {}, "Name", name),
      el("details", {}, el("summary", {}, "Its own parameters (those left as they are follow the defaults)"),
        el("table", {}, el("tbody", {}, inputs.map(({ p, input }) => el("tr", { "data-key": p.name },
          el("td", { title: p.doc }, p.name, el("div", { class: "muted" }, p.doc)),
          el("td", {}, input), el("td", {}, p.unit)))))),
      el("p", { class: "actions" }, make), result);
  }

  function typed(p, text) {
    if (p.type === "boolean") return text === "true";
    if ((p.type === "integer" || p.type === "number") && text.trim() !== "" && !isNaN(Number(text))) {
      return Number(text);
    }
    return text;
  }

  const FORMS = { publish, create };

  SECTIONS.form = async (section, data, node) => node || FORMS[section.form](section);

  // A dialog showing one message whole: its figures, every header, its body (text, or the
  // hex of a binary one, with its size).
  function showMessage(message) {
    const figures = [["Message id", message.message_id], ["Size", message.size + " bytes"],
      ["Persistent", message.persistent ? "yes" : "no"], ["Priority", message.priority],
      ["Expires", message.expires ? new Date(message.expires).toISOString() : "never"],
      ["Redelivered", message.redelivered ? "yes" : "no"],
      ["Stored at", message.stored_at || "not stored"]];
    const headers = Object.entries(message.headers || {});
    const overlay = el("div", { class: "overlay" }, el("div", { class: "dialog message", role: "dialog" },
      el("h2", {}, "Message " + message.message_id),
      el("table", { id: "message-figures" }, el("tbody", {}, figures.map(([k, v]) =>
        el("tr", {}, el("th", {}, k), el("td", {}, String(v)))))),
      el("h3", {}, "Headers"),
      headers.length
        ? el("table", { id: "message-headers" }, el("tbody", {}, headers.map(([k, v]) =>
          el("tr", {}, el("th", {}, k), el("td", {}, v)))))
        : el("p", { class: "muted" }, "none"),
      el("h3", {}, (message.encoding === "hex" ? "Body (binary, " + message.size + " bytes, as hex)" : "Body (text)")
        + (message.body_truncated ? ": its first bytes only (Admin.messagebytes)" : "")),
      el("pre", { class: "body", id: "message-body", "data-encoding": message.encoding }, message.body),
      el("p", { class: "actions" }, el("a", { href: "#/story/" + encodeURIComponent(message.message_id),
        onclick: () => overlay.remove() }, "Life story"), " ",
      el("button", { type: "button", "data-action": "close", onclick: () => overlay.remove() }, "Close"))));
    document.body.append(overlay);
  }

  return { chooseDestination, headersOf, showMessage };
})();
