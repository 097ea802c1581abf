// Page "consumers" (`#/consumers`): the consumer instances chimed has heard from, by group
// and zone, and per group its live consumers, queued and running work, with unattended
// groups (queued work, no live consumer) highlighted. `?stale=include` lists instances no
// longer live too (GET /v1/consumers?stale=). Refreshes in place every 5 s.
import { api } from "../api.js";
import { count, errorBox, fill, h, state, table, time } from "../ui.js";

function draw(data) {
  const unattended = data.groups.filter((g) => g.unattended).length;
  return [
    h("h2", {}, "Groups", unattended ? h("span", { class: "state", "data-state": "dead" }, `${unattended} unattended`) : null),
    table({
      caption: "Groups",
      rows: data.groups,
      rowKey: (g) => g.group,
      empty: "No group yet.",
      columns: [
        { label: "Group", cell: (g) => h("strong", {}, g.group) },
        { label: "Live consumers", cell: (g) => count(g.live_consumers) },
        { label: "Queued", cell: (g) => count(g.queued) },
        { label: "Running", cell: (g) => count(g.running) },
        { label: "Status", cell: (g) => (g.unattended ? h("span", { class: "state unattended", "data-state": "dead" }, "unattended") : h("span", { class: "muted" }, "ok")) },
      ],
    }),
    h("h2", {}, "Instances"),
    table({
      caption: "Instances by group and zone",
      // Grouped for reading: by group, then zone, then instance (the API orders by group and instance).
      rows: [...data.instances].sort((a, b) => a.group.localeCompare(b.group) || (a.zone ?? "").localeCompare(b.zone ?? "") || a.instance.localeCompare(b.instance)),
      rowKey: (i) => `${i.group}/${i.instance}`,
      empty: "No consumer instance heard from.",
      columns: [
        { label: "Group", cell: (i) => i.group },
        { label: "Zone", cell: (i) => i.zone ?? h("span", { class: "muted" }, "–") },
        { label: "Instance", cell: (i) => h("code", {}, i.instance) },
        { label: "Broadcast", cell: (i) => (i.broadcast ? "yes" : "no") },
        { label: "Version", cell: (i) => i.version ?? h("span", { class: "muted" }, "–") },
        { label: "First seen", cell: (i) => time(i.first_seen) },
        { label: "Last seen", cell: (i) => time(i.last_seen) },
        { label: "Live", cell: (i) => state(i.live ? "live" : "down") },
        { label: "Running", cell: (i) => count(i.running) },
      ],
    }),
  ];
}

export default async function render(ctx) {
  const stale = ctx.query.get("stale") === "include";
  const toggle = h("input", { type: "checkbox", id: "consumers-stale", name: "stale", checked: stale });
  toggle.addEventListener("change", () => ctx.setQuery({ stale: toggle.checked ? "include" : null }));
  const box = h("div", { "data-section": "consumers" });
  ctx.main.append(h("h1", {}, "Consumers"),
    h("div", { class: "toolbar" }, h("label", { class: "inline", for: "consumers-stale" }, toggle, " Include instances no longer live")),
    box);
  async function refresh() {
    try {
      const data = await api.get("/v1/consumers", { stale: stale ? "include" : "exclude" });
      if (!ctx.stale()) fill(box, draw(data));
    } catch (error) {
      if (!ctx.stale()) fill(box, errorBox(error));
    }
  }
  await refresh();
  ctx.every(5000, refresh);
}
