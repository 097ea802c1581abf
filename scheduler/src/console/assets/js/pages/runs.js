// Page "runs": searches runs across jobs with GET /v1/runs. The filters live in the
// hash's query (`#/runs?state=dead&app=shop`), so a search is a link; the time range
// inputs are in the viewer's zone and sent as RFC 3339 UTC. The visible page re-polls, so
// run states change without a reload; paging follows the API's cursor.
import { api } from "../api.js";
import { between, duration, errorBox, field, fill, h, pager, state, table, time } from "../ui.js";

const STATES = ["scheduled", "dispatched", "acked", "succeeded", "failed", "dead", "cancelled"];
const MODES = ["group", "broadcast", "zone", "sharded"];
const TEXT_FILTERS = ["app", "group", "job"];
const TIME_FILTERS = [
  ["fired_after", "Fired at or after"],
  ["fired_before", "Fired before"],
  ["finished_after", "Finished at or after"],
  ["finished_before", "Finished before"],
];

/** An RFC 3339 instant as a datetime-local value in the viewer's zone. */
function toLocalInput(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

/** A datetime-local value (viewer's zone) as an RFC 3339 UTC instant, or "". */
function toUtc(local) {
  if (!local) return "";
  const at = new Date(local);
  return Number.isNaN(at.getTime()) ? "" : at.toISOString();
}

function filterForm(ctx) {
  const q = ctx.query;
  const form = h("form", { class: "panel", "aria-label": "Search runs", role: "search" },
    h("div", { class: "form-grid" },
      field({ label: "State", name: "state", value: q.get("state") || "",
        options: [["", "any state"], ...STATES.map((s) => [s, s]), ["failed,dead", "failed or dead"]] }),
      field({ label: "App", name: "app", value: q.get("app") || "" }),
      field({ label: "Job id", name: "job", value: q.get("job") || "" }),
      field({ label: "Group", name: "group", value: q.get("group") || "" }),
      field({ label: "Mode", name: "mode", value: q.get("mode") || "",
        options: [["", "any mode"], ...MODES.map((m) => [m, m])] }),
      TIME_FILTERS.map(([name, label]) => field({ label, name, type: "datetime-local", value: toLocalInput(q.get(name)) })),
      field({ label: "Per page", name: "limit", value: q.get("limit") || "50",
        options: [["20", "20"], ["50", "50"], ["100", "100"], ["200", "200"]] })),
    h("div", { class: "actions" },
      h("button", { type: "submit", "data-nav": "search" }, "Search"),
      h("button", { type: "button", class: "ghost", "data-nav": "clear", onclick: () => ctx.setQuery({}) }, "Clear")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = { state: form.elements.state.value, mode: form.elements.mode.value, limit: form.elements.limit.value };
    for (const name of TEXT_FILTERS) values[name] = form.elements[name].value.trim();
    for (const [name] of TIME_FILTERS) values[name] = toUtc(form.elements[name].value);
    ctx.setQuery(values);
  });
  return form;
}

function runsTable(runs) {
  return table({
    caption: "Runs, newest fire time first",
    rowKey: (run) => run.id,
    empty: "No run matches these filters.",
    rows: runs,
    columns: [
      { label: "Fire time", cell: (run) => h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, time(run.fire_time)) },
      { label: "Job", cell: (run) => h("a", { href: `#/jobs/${encodeURIComponent(run.job_id)}`, class: "mono" }, run.job_id) },
      { label: "State", cell: (run) => state(run.state) },
      { label: "Attempt", cell: (run) => String(run.attempt) },
      { label: "Lateness", cell: (run) => duration(between(run.fire_time, run.dispatched_at)) },
      { label: "Duration", cell: (run) => duration(between(run.acked_at || run.dispatched_at, run.finished_at)) },
      { label: "Consumer", cell: (run) => run.consumer || h("span", { class: "muted" }, "–") },
      { label: "Run", cell: (run) => h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono", "aria-label": `Run ${run.id}` }, run.id.slice(0, 8)) },
    ],
  });
}

export default async function render(ctx) {
  const q = ctx.query;
  const query = {};
  for (const name of ["state", "mode", "limit", "cursor", ...TEXT_FILTERS, ...TIME_FILTERS.map(([n]) => n)]) {
    if (q.get(name)) query[name] = q.get(name);
  }
  if (!query.limit) query.limit = "50";
  const results = h("div", { class: "run-results", "aria-live": "polite" });
  fill(ctx.main, h("h1", {}, "Runs"), filterForm(ctx), results);

  const load = async () => {
    const page = await api.get("/v1/runs", query);
    if (ctx.stale()) return;
    const scroll = window.scrollY;
    fill(results,
      runsTable(page.items),
      pager({
        cursor: query.cursor || null,
        next: page.next,
        onPage: (cursor) => ctx.setQuery({ ...Object.fromEntries(q), cursor }),
      }));
    window.scrollTo(0, scroll);
  };
  try {
    await load();
  } catch (error) {
    fill(results, errorBox(error));
    const slot = error.field && ctx.main.querySelector(`.field-error[data-field="${CSS.escape(error.field)}"]`);
    if (slot) { slot.textContent = error.message; slot.hidden = false; }
  }
  ctx.every(3000, () => load().catch((error) => fill(results, errorBox(error))));
}
