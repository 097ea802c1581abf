// Page "audit" (`#/audit`): the changes made through the API, newest first
// (GET /v1/audit). The filters (actor, action, target, app, since, until) and the page's
// cursor live in the hash query, so a filtered view is a link; paging is the API's cursor.
import { api } from "../api.js";
import { errorBox, field, fill, h, pager, showError, table, time } from "../ui.js";

const FILTERS = ["actor", "action", "target", "app", "since", "until"];
const ACTIONS = ["job.create", "job.update", "job.delete", "job.pause", "job.resume", "job.trigger", "job.backfill",
  "run.cancel", "dlq.replay", "dlq.purge", "token.create", "token.revoke"];

function summary(change) {
  if (change === null || change === undefined) return "";
  const text = JSON.stringify(change);
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}

export default async function render(ctx) {
  const current = Object.fromEntries(FILTERS.map((name) => [name, ctx.query.get(name) || ""]));
  const cursor = ctx.query.get("cursor");
  const form = h("form", { class: "toolbar", "aria-label": "Filter the audit log", role: "search" },
    h("div", { class: "form-error" }),
    field({ label: "Actor", name: "actor", value: current.actor }),
    field({ label: "Action", name: "action", value: current.action, options: [["", "any"], ...ACTIONS.map((a) => [a, a])] }),
    field({ label: "Target", name: "target", value: current.target, help: "job:<id>, dlq:<queue>, token:<name>" }),
    field({ label: "App", name: "app", value: current.app }),
    field({ label: "Since (RFC 3339)", name: "since", value: current.since }),
    field({ label: "Until (RFC 3339)", name: "until", value: current.until }),
    h("button", { type: "submit", "data-nav": "filter" }, "Filter"),
    h("button", { type: "button", class: "ghost", "data-nav": "clear", onclick: () => ctx.setQuery({}) }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    ctx.setQuery(Object.fromEntries(FILTERS.map((name) => [name, form.elements[name].value.trim()])));
  });
  const box = h("div", { "data-section": "audit" });
  ctx.main.append(h("h1", {}, "Audit log"), form, box);

  let page;
  try {
    page = await api.get("/v1/audit", { ...current, limit: 50, cursor });
  } catch (error) {
    if (error.field && FILTERS.includes(error.field)) showError(form, error);
    else fill(box, errorBox(error));
    return;
  }
  fill(box,
    table({
      caption: "Audit entries",
      rows: page.items,
      rowKey: (e) => e.id,
      empty: "No entry matches.",
      columns: [
        { label: "At", cell: (e) => time(e.at) },
        { label: "Actor", cell: (e) => e.actor },
        { label: "Action", cell: (e) => h("code", {}, e.action) },
        { label: "Target", cell: (e) => targetLink(e.target) },
        { label: "App", cell: (e) => e.app ?? h("span", { class: "muted" }, "–") },
        { label: "Change", cell: (e) => h("span", { class: "mono", title: JSON.stringify(e.change) }, summary(e.change)) },
      ],
    }),
    pager({ cursor, next: page.next, onPage: (next) => ctx.setQuery({ ...current, cursor: next }) }));
}

function targetLink(target) {
  if (!target) return h("span", { class: "muted" }, "–");
  const [kind, ...rest] = target.split(":");
  const id = rest.join(":");
  if (kind === "job") return h("a", { href: `#/jobs/${encodeURIComponent(id)}` }, target);
  if (kind === "run") return h("a", { href: `#/runs/${encodeURIComponent(id)}` }, target);
  if (kind === "dlq") return h("a", { href: `#/dlq/${encodeURIComponent(id)}` }, target);
  return h("code", {}, target);
}
