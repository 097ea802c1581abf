// Page "job_detail" (#/jobs/:id): the job, its schedule in words (the preview's
// `description`) and next fires, its recent runs as a timeline and a table (refreshed
// live), its version history, and the actions the token may take: edit, pause, resume,
// trigger, backfill (with a dry run), delete.
import { api } from "../api.js";
import { between, clearFieldErrors, confirm, duration, errorBox, field, fill, h, pager, showError, state, table, time, toast } from "../ui.js";
import { jobState, scheduleText, targetText } from "./jobs.js";

const RUNS = 25;

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

/** The run's lateness (dispatched − fire time) and duration (finished − acked or dispatched). */
function lateness(run) {
  return between(run.fire_time, run.dispatched_at);
}
function runDuration(run) {
  return between(run.acked_at || run.dispatched_at, run.finished_at);
}

/** What a run is part of: shard/zone for several items, instances for broadcast. */
function runItem(run) {
  if (run.mode === "sharded") return `shard ${run.shard + 1}/${run.shard_total}`;
  if (run.mode === "zone") return `zone ${run.zone ?? run.shard}`;
  if (run.mode === "broadcast") {
    const receipts = run.instances || [];
    return receipts.length
      ? `${receipts.length} instance${receipts.length === 1 ? "" : "s"}: ${receipts.map((r) => `${r.instance} ${r.state}`).join(", ")}`
      : "no receipt yet";
  }
  return "";
}

function timeline(runs) {
  const shown = [...runs].reverse();
  const sizes = shown.map((run) => runDuration(run) ?? lateness(run) ?? 0);
  const largest = Math.max(1, ...sizes);
  return h("div", { class: "timeline", role: "list", "aria-label": "Recent runs, oldest first" },
    shown.map((run, i) => {
      const link = h("a", {
        href: `#/runs/${encodeURIComponent(run.id)}`, role: "listitem", "data-state": run.state,
        title: `${run.fire_time} · ${run.state} · ${duration(sizes[i])}`,
      }, h("span", { class: "sr-only" }, `${run.fire_time} ${run.state}`));
      link.style.height = `${Math.max(8, Math.round((sizes[i] / largest) * 100))}%`;
      return link;
    }));
}

export default async function render(ctx) {
  const { main, params } = ctx;
  const id = encodeURIComponent(params.id);
  const [job, preview] = await Promise.all([
    api.get(`/v1/jobs/${id}`),
    api.get(`/v1/jobs/${id}/preview`, { count: 5 }),
  ]);

  const actions = h("div", { class: "actions", role: "toolbar", "aria-label": "Job actions" });
  const runsBox = h("div", { class: "job-runs", "aria-live": "polite" });
  const versionsBox = h("div", { class: "job-versions" });
  const backfillBox = h("div", { class: "job-backfill" });
  let runsCursor = null;

  async function act(label, path, done) {
    try {
      const answer = await api.post(`/v1/jobs/${id}/${path}`);
      toast(done(answer));
      ctx.go(`#/jobs/${id}`);
    } catch (error) {
      toast(`${label} failed: ${error.message}`, "error");
    }
  }

  if (ctx.can("change_jobs")) {
    actions.append(h("a", { class: "button", href: `#/jobs/${id}/edit`, "data-action": "edit" }, "Edit"));
    actions.append(job.paused
      ? h("button", { type: "button", "data-action": "resume", onclick: () => act("Resume", "resume", () => "Resumed") }, "Resume")
      : h("button", { type: "button", "data-action": "pause", onclick: () => act("Pause", "pause", () => "Paused") }, "Pause"));
  }
  if (ctx.can("trigger_jobs")) {
    actions.append(h("button", {
      type: "button", "data-action": "trigger",
      onclick: async () => {
        try {
          const run = await api.post(`/v1/jobs/${id}/trigger`);
          toast(`Triggered: run ${run.id}`);
          await refreshRuns();
        } catch (error) {
          toast(`Trigger failed: ${error.message}`, "error");
        }
      },
    }, "Trigger now"));
    actions.append(h("button", { type: "button", class: "ghost", "data-dialog": "backfill", onclick: () => { backfillBox.hidden = !backfillBox.hidden; } }, "Backfill…"));
  }
  if (ctx.can("change_jobs")) {
    actions.append(h("button", {
      type: "button", class: "danger", "data-action": "delete",
      onclick: async () => {
        if (!await confirm(`Delete ${job.app}/${job.name} and its run history? This cannot be undone.`, "Delete job")) return;
        try {
          await api.delete(`/v1/jobs/${id}`);
          toast(`Deleted ${job.app}/${job.name}`);
          ctx.go("#/jobs");
        } catch (error) {
          toast(`Delete failed: ${error.message}`, "error");
        }
      },
    }, "Delete"));
  }

  // Backfill: from/to, rate, overlap, dry run first.
  if (ctx.can("trigger_jobs")) {
    backfillBox.hidden = true;
    const result = h("div", { class: "backfill-result", "aria-live": "polite" });
    const form = h("form", { class: "panel form-grid", novalidate: true, "aria-label": "Backfill" },
      h("div", { class: "form-error wide" }),
      field({ label: "From", name: "from", help: "RFC 3339, included" }),
      field({ label: "To", name: "to", help: "RFC 3339, excluded, not in the future" }),
      field({ label: "Rate (fires a second)", name: "rate", value: "10" }),
      field({ label: "Overlap", name: "overlap", value: "allow", options: [["allow", "allow"], ["forbid", "forbid"]] }),
      field({ label: "Dry run (count only)", name: "dry_run", type: "checkbox", value: true }),
      h("div", { class: "actions wide" }, h("button", { type: "submit", "data-action": "backfill" }, "Backfill")),
      h("div", { class: "wide" }, result));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearFieldErrors(form);
      fill(form.querySelector(".form-error"));
      const body = {
        from: form.elements.from.value.trim(), to: form.elements.to.value.trim(),
        overlap: form.elements.overlap.value, dry_run: form.elements.dry_run.checked,
      };
      if (form.elements.rate.value.trim()) body.rate = Number(form.elements.rate.value.trim());
      try {
        const answer = await api.post(`/v1/jobs/${id}/backfill`, body);
        fill(result, facts([
          ["Fires in range", String(answer.fires)],
          ["First fire", time(answer.first_fire)],
          ["Last fire", time(answer.last_fire)],
          answer.dry_run ? ["Dry run", "nothing recorded"] : ["Recorded", `${answer.recorded} fires (${answer.runs} runs), ${answer.present} already there`],
        ]));
        if (!answer.dry_run) await refreshRuns();
      } catch (error) {
        showError(form, error);
      }
    });
    backfillBox.append(h("h2", {}, "Backfill"), form);
  }

  async function refreshRuns() {
    const page = await api.get(`/v1/jobs/${id}/runs`, { limit: RUNS, cursor: runsCursor });
    if (ctx.stale()) return;
    fill(runsBox,
      page.items.length ? timeline(page.items) : null,
      table({
        caption: "Recent runs",
        rows: page.items,
        rowKey: (run) => run.id,
        empty: "No run yet.",
        columns: [
          { label: "Fire time", cell: (run) => h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, time(run.fire_time)) },
          { label: "State", cell: (run) => state(run.state) },
          { label: "Trigger", cell: (run) => run.trigger },
          { label: "Item", cell: runItem },
          { label: "Attempt", cell: (run) => String(run.attempt) },
          { label: "Lateness", cell: (run) => duration(lateness(run)) },
          { label: "Duration", cell: (run) => duration(runDuration(run)) },
          { label: "Consumer", cell: (run) => run.consumer || "–" },
        ],
      }),
      pager({ cursor: runsCursor, next: page.next, onPage: (next) => { runsCursor = next; refreshRuns(); } }));
  }

  async function loadVersions() {
    try {
      const versions = await api.get(`/v1/jobs/${id}/versions`);
      fill(versionsBox, table({
        caption: "Version history",
        rows: versions.items,
        rowKey: (entry) => entry.id,
        columns: [
          { label: "At", cell: (entry) => time(entry.at) },
          { label: "Version", cell: (entry) => String(entry.change?.version ?? "–") },
          { label: "Change", cell: (entry) => entry.action },
          { label: "By", cell: (entry) => entry.actor },
        ],
      }));
    } catch (error) {
      fill(versionsBox, errorBox(error));
    }
  }

  const fires = preview.fires.length
    ? h("ol", { class: "fires" }, preview.fires.map((f) => h("li", {}, time(f.at), h("span", { class: "muted" }, ` · ${f.local} (${preview.timezone})`), f.due ? h("span", { class: "muted" }, " · published ", time(f.due)) : null)))
    : h("p", { class: "muted" }, "No fire ahead.");

  fill(main,
    h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")),
    h("h1", {}, `${job.app}/${job.name}`, " ", jobState(job)),
    actions,
    backfillBox,
    h("section", { class: "panel" },
      h("h2", {}, "Schedule"),
      h("p", { "data-description": "" }, preview.description),
      facts([
        ["Expression", h("code", {}, scheduleText(job.schedule))],
        ["Target", targetText(job.target)],
        ["Next fire", time(job.next_fire_at)],
        job.paused_reason ? ["Paused because", job.paused_reason] : null,
        job.start_at ? ["Start at", time(job.start_at)] : null,
        job.end_at ? ["End at", time(job.end_at)] : null,
        job.jitter ? ["Jitter", job.jitter] : null,
        ["Delivery", `ack ${job.ack_timeout}, run ${job.run_timeout}, ${job.max_attempts} attempts, misfire ${job.misfire}, overlap ${job.overlap}`],
        ["Version", String(job.version)],
        ["Updated", time(job.updated_at)],
      ]),
      h("h3", {}, preview.paused ? "Next fires (once resumed)" : "Next fires"),
      fires),
    h("section", { class: "panel" }, h("h2", {}, "Recent runs"), runsBox),
    h("section", { class: "panel" }, h("h2", {}, "Payload"), h("pre", {}, JSON.stringify(job.payload ?? null, null, 2))),
    h("section", { class: "panel" }, h("h2", {}, "Version history"), versionsBox));

  await Promise.all([refreshRuns(), loadVersions()]);
  ctx.every(2000, () => { refreshRuns().catch(() => {}); });
}
