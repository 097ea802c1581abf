// Page "jobs" (#/jobs): the job list, searched, filtered and sorted by the API
// (GET /v1/jobs with app, group, mode, paused, q, sort by name or updated_at, cursor,
// limit; the API has no next-fire order). The filters live
// in the hash's query, so a filtered list is a link; paging uses the API's cursor.
import { api } from "../api.js";
import { field, fill, h, pager, showError, state, table, time } from "../ui.js";

const FILTERS = ["app", "group", "mode", "paused", "q", "sort"];
const PAGE = 50;

/** A schedule as its JSON names it: the cron and zone, the interval or the instant. */
export function scheduleText(schedule) {
  if (!schedule) return "–";
  if (schedule.cron) return `${schedule.cron}${schedule.timezone ? ` (${schedule.timezone})` : ""}`;
  if (schedule.every) return `every ${schedule.every}`;
  if (schedule.at) return `once at ${schedule.at}`;
  return "–";
}

/** The target: group and mode (with shards or zones). */
export function targetText(target) {
  if (!target) return "–";
  let mode = target.mode || "group";
  if (mode === "sharded" && target.shards) mode = `sharded(${target.shards})`;
  if (mode === "zone") mode = `zone(${(target.zones || []).join(",") || "live"})`;
  return `${target.group} · ${mode}`;
}

/** The job's state badges: paused (and why), finished, or running. */
export function jobState(job) {
  const badges = [];
  if (job.paused) badges.push(state("paused"));
  if (job.paused_reason) badges.push(h("span", { class: "muted", "data-paused-reason": "" }, ` ${job.paused_reason}`));
  if (job.finished) badges.push(state("finished"));
  if (!badges.length) badges.push(state("running"));
  return badges;
}

export default async function render(ctx) {
  const { main, query } = ctx;
  const current = Object.fromEntries(FILTERS.map((key) => [key, query.get(key) || ""]));
  const cursor = query.get("cursor") || null;

  const form = h("form", { class: "toolbar", role: "search", "aria-label": "Filter jobs" },
    field({ label: "Search", name: "q", type: "search", value: current.q, attrs: { placeholder: "name or app/name" } }),
    field({ label: "App", name: "app", value: current.app }),
    field({ label: "Group", name: "group", value: current.group }),
    field({ label: "Mode", name: "mode", value: current.mode, options: [["", "any"], ["group", "group"], ["broadcast", "broadcast"], ["zone", "zone"], ["sharded", "sharded"]] }),
    field({ label: "State", name: "paused", value: current.paused, options: [["", "any"], ["false", "running"], ["true", "paused"]] }),
    h("button", { type: "submit", "data-nav": "filter" }, "Filter"),
    h("button", { type: "button", class: "ghost", "data-nav": "clear", onclick: () => ctx.setQuery({}) }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = { sort: current.sort };
    for (const key of ["q", "app", "group", "mode", "paused"]) values[key] = form.elements[key].value.trim();
    ctx.setQuery(values);
  });
  for (const name of ["mode", "paused"]) {
    form.elements[name].addEventListener("change", () => form.requestSubmit());
  }

  const header = h("div", { class: "page-head" },
    h("h1", {}, "Jobs"),
    ctx.can("change_jobs") ? h("a", { href: "#/jobs/new", class: "button", "data-action": "create" }, "New job") : null);
  const list = h("div", { class: "jobs-list", "aria-live": "polite" });
  fill(main, header, form, list);

  const params = { limit: PAGE, cursor };
  for (const key of FILTERS) if (current[key]) params[key] = current[key];
  let page;
  try {
    page = await api.get("/v1/jobs", params);
  } catch (error) {
    showError(form, error);
    return;
  }

  const sortKey = current.sort.replace(/^-/, "");
  const sort = {
    key: sortKey || null,
    desc: current.sort.startsWith("-"),
    onSort: (key, desc) => ctx.setQuery({ ...current, sort: `${desc ? "-" : ""}${key}` }),
  };
  fill(list,
    table({
      caption: "Jobs",
      rows: page.items,
      rowKey: (job) => job.id,
      sort,
      empty: "No job matches.",
      columns: [
        { label: "Job", sort: "name", cell: (job) => h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, `${job.app}/${job.name}`) },
        { label: "Schedule", cell: (job) => h("code", {}, scheduleText(job.schedule)) },
        { label: "Target", cell: (job) => targetText(job.target) },
        { label: "Next fire", cell: (job) => time(job.next_fire_at) },
        { label: "State", cell: jobState },
        { label: "Updated", sort: "updated_at", cell: (job) => time(job.updated_at) },
      ],
    }),
    pager({ cursor, next: page.next, onPage: (next) => ctx.setQuery({ ...current, cursor: next }) }));
}
