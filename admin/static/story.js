// A message's life story: its journal records in order, looked up by its id (the page's
// parameter: #/story/ID, from a link of the browse or DMQ tables, or pasted into the box).
"use strict";

(() => {
  // The fields each record has besides these are its details.
  const SHOWN = new Set(["v", "event", "ts", "message_id", "destination", "file"]);

  function details(record) {
    return Object.entries(record).filter(([k]) => !SHOWN.has(k))
      .map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join("  ");
  }

  async function lookUp(id, result) {
    result.replaceChildren(el("p", { class: "muted" }, "looking through the journal…"));
    try {
      const story = await api("GET", "/api/messages/" + encodeURIComponent(id) + "/story");
      result.replaceChildren(
        el("p", { class: "muted", id: "story-summary" }, story.records.length + " records in " +
          story.files + " journal files, found in " + (story.seconds * 1000).toFixed(0) + " ms" +
          (story.hidden ? "; " + story.hidden + " of destinations you may not read left out" : "")),
        el("table", { class: "story" },
          el("thead", {}, el("tr", {}, ["Time (UTC)", "Event", "Destination", "Details", "File"].map((t) => el("th", {}, t)))),
          el("tbody", {}, story.records.map((r) => el("tr", { "data-event": r.event },
            el("td", {}, FORMATS.time(r.ts)),
            el("td", {}, r.event),
            el("td", {}, r.destination ? el("a", { href: "#/destination/" + encodeURIComponent(r.destination) }, r.destination) : ""),
            el("td", { class: "reason" }, details(r)),
            el("td", { class: "muted" }, r.file))))));
    } catch (error) {
      result.replaceChildren(el("p", { class: "error" }, error.message));
    }
  }

  SECTIONS.story = async (section, data, node) => {
    if (node) return node;
    const id = state.page.value || "";
    const input = el("input", { type: "search", name: "message-id", value: id, size: 40,
      placeholder: "a message id (wmq-...)" });
    const result = el("div", { id: "story" });
    const go = () => {
      const wanted = input.value.trim();
      if (wanted) window.location.hash = "#/story/" + encodeURIComponent(wanted);
    };
    const box = el("div", {},
      el("form", { class: "inline-form", onsubmit: (e) => { e.preventDefault(); go(); } }, input,
        el("button", { type: "submit", class: "primary", "data-action": "look-up" }, "Look up")),
      result);
    if (id) lookUp(id, result);
    return box;
  };
})();
