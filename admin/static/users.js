// The console's Users page (admins): the users file wiremq passwd and grant write, changed in
// place. Every change is one call of the API, which answers with the file as it is then.
"use strict";

(() => {
  const PERMISSIONS = ["read", "write", "create", "admin"];

  async function change(method, url, body, box) {
    try {
      const answer = await api(method, url, body);
      flash("Saved to " + answer.file);
      draw(box, answer);
    } catch (error) {
      flash(error.message, true);
    }
  }

  function permissionRows(owner, grants, box) {
    // owner: "/api/users/NAME" or "/api/groups/NAME"
    const rows = Object.entries(grants).map(([pattern, words]) => grantRow(owner, pattern, words, box));
    const pattern = el("input", { name: "pattern", placeholder: "/queue/orders.> or >", size: 22 });
    const boxes = PERMISSIONS.map((w) => el("input", { type: "checkbox", name: w }));
    rows.push(el("tr", { class: "new-grant" },
      el("td", {}, pattern),
      el("td", {}, PERMISSIONS.map((w, i) => el("label", { class: "inline" }, boxes[i], " " + w + " "))),
      el("td", {}, el("button", { type: "button", "data-action": "grant", onclick: () => change("PUT",
        owner + "/permissions/" + encodeURIComponent(pattern.value.trim()),
        { permissions: PERMISSIONS.filter((w, i) => boxes[i].checked) }, box) }, "Grant"))));
    return el("table", { class: "grants" }, el("tbody", {}, rows));
  }

  function grantRow(owner, pattern, words, box) {
    const held = new Set(words.includes("admin") ? PERMISSIONS : words);
    const boxes = PERMISSIONS.map((w) => el("input", { type: "checkbox", name: w, checked: held.has(w) }));
    return el("tr", { "data-pattern": pattern },
      el("td", {}, pattern),
      el("td", {}, PERMISSIONS.map((w, i) => el("label", { class: "inline" }, boxes[i], " " + w + " "))),
      el("td", {}, el("button", { type: "button", "data-action": "save-grant", onclick: () => change("PUT",
        owner + "/permissions/" + encodeURIComponent(pattern),
        { permissions: PERMISSIONS.filter((w, i) => boxes[i].checked) }, box) }, "Save")));
  }

  function userRow(user, roles, box) {
    const url = "/api/users/" + encodeURIComponent(user.name);
    const role = el("select", { name: "role" }, roles.map((r) => el("option", { value: r, selected: r === user.role }, r)));
    const groups = el("input", { name: "groups", value: user.groups.join(", "), size: 18 });
    const password = el("input", { name: "password", type: "password", placeholder: "new password", size: 12 });
    return el("tr", { "data-user": user.name },
      el("td", {}, user.name),
      el("td", {}, role),
      el("td", {}, groups),
      el("td", {}, password),
      el("td", {}, el("div", { class: "actions" },
        el("button", { type: "button", "data-action": "save-user", onclick: () => {
          const body = { role: role.value, groups: groups.value.split(",").map((g) => g.trim()).filter(Boolean) };
          if (password.value) body.password = password.value;
          change("PATCH", url, body, box);
        } }, "Save"),
        el("button", { type: "button", class: "danger", "data-action": "remove-user", onclick: () => {
          if (window.confirm("Remove user " + user.name + "?")) change("DELETE", url, undefined, box);
        } }, "Remove"))),
      el("td", {}, permissionRows(url, user.permissions, box)));
  }

  function addForm(roles, configured, box) {
    const name = el("input", { name: "new-name", placeholder: "name", size: 12 });
    const password = el("input", { name: "new-password", type: "password", placeholder: "password", size: 12 });
    // the least role, but the first user of an open console must be an admin
    const first = configured ? roles[roles.length - 1] : roles[0];
    const role = el("select", { name: "new-role" }, roles.map((r) => el("option", { value: r, selected: r === first }, r)));
    const groups = el("input", { name: "new-groups", placeholder: "groups, comma separated", size: 18 });
    return el("form", { class: "inline-form", onsubmit: (e) => e.preventDefault() },
      name, password, role, groups,
      el("button", { type: "button", class: "primary", "data-action": "add-user", onclick: () => change("POST",
        "/api/users", { name: name.value.trim(), password: password.value, role: role.value,
          groups: groups.value.split(",").map((g) => g.trim()).filter(Boolean) }, box) }, "Add user"));
  }

  function draw(box, answer) {
    const groupName = el("input", { name: "group", placeholder: "group (everyone, anonymous, ...)", size: 22 });
    const groups = Object.entries(answer.groups).map(([name, grants]) =>
      el("tr", { "data-group": name }, el("td", {}, name),
        el("td", {}, permissionRows("/api/groups/" + encodeURIComponent(name), grants, box))));
    box.replaceChildren(
      el("p", { class: "muted" }, answer.configured
        ? "The users file " + answer.file + ": the same file wiremq passwd and wiremq grant write."
        : "No users file yet: the first user added must be an admin, and the console then needs a login."),
      addForm(answer.roles, answer.configured, box),
      el("h2", {}, "Users"),
      el("table", { class: "users" },
        el("thead", {}, el("tr", {}, ["User", "Role", "Groups", "Password", "", "Permissions"].map((t) => el("th", {}, t)))),
        el("tbody", {}, answer.users.map((u) => userRow(u, answer.roles, box)))),
      el("h2", {}, "Groups"),
      el("table", { class: "groups" }, el("tbody", {}, groups,
        el("tr", { class: "new-group" }, el("td", {}, groupName), el("td", {},
          el("button", { type: "button", "data-action": "new-group", onclick: () => {
            const name = groupName.value.trim();
            if (!name) return;
            const row = el("tr", { "data-group": name }, el("td", {}, name),
              el("td", {}, permissionRows("/api/groups/" + encodeURIComponent(name), {}, box)));
            row.classList.add("unsaved");
            groupName.closest("tr").before(row);
          } }, "Add a group's grant"))))));
  }

  SECTIONS.users = async (section, data, node) => {
    if (node) return node;  // changes redraw it; the page's refresh leaves what is typed alone
    const box = el("div", { class: "users-editor" });
    draw(box, await api("GET", "/api/users"));
    return box;
  };
})();
