// Page "run_detail": one run as GET /v1/runs/{id} answers it — every field, its attempt
// history, output, error, progress and heartbeats, the items of a sharded or zone fire and
// the receipts of a broadcast run. Refreshes until the run finishes. Cancels an
// unfinished run (POST /v1/runs/{id}/cancel) when the token may; a dead run's task sits
// in its group's DLQ, so "replay" links to the DLQ page filtered to the run's job.
import { api } from "../api.js";
import { confirm, duration, between, errorBox, fill, h, state, table, time, toast } from "../ui.js";

const UNFINISHED = ["scheduled", "dispatched", "acked", "failed"];

function json(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "–");
  return h("pre", { class: "mono" }, JSON.stringify(value, null, 2));
}

function text(value) {
  return value === null || value === undefined || value === "" ? h("span", { class: "muted" }, "–") : String(value);
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([label, value, key]) => [
    h("dt", {}, label), h("dd", { "data-fact": key }, value)]));
}

function runLink(id, current) {
  return id === current ? h("span", { class: "mono" }, `${id.slice(0, 8)} (this run)`)
    : h("a", { href: `#/runs/${encodeURIComponent(id)}`, class: "mono" }, id.slice(0, 8));
}

function overview(run, job) {
  const jobLabel = job ? `${job.app}/${job.name}` : run.job_id;
  return h("section", { class: "panel", "aria-label": "Run" }, facts([
    ["State", state(run.state), "state"],
    ["Job", h("a", { href: `#/jobs/${encodeURIComponent(run.job_id)}` }, jobLabel), "job"],
    ["Run id", h("span", { class: "mono" }, run.id), "id"],
    ["Fire time", time(run.fire_time), "fire_time"],
    ["Trigger", text(run.trigger), "trigger"],
    ["Mode", text(run.mode), "mode"],
    ["Shard", `${run.shard + 1} of ${run.shard_total}`, "shard"],
    ["Zone", text(run.zone), "zone"],
    ["Attempt", text(run.attempt), "attempt"],
    ["Consumer", text(run.consumer), "consumer"],
    ["Created", time(run.created_at), "created_at"],
    ["Dispatched", time(run.dispatched_at), "dispatched_at"],
    ["Lateness", duration(between(run.fire_time, run.dispatched_at)), "lateness"],
    ["Acked", time(run.acked_at), "acked_at"],
    ["Finished", time(run.finished_at), "finished_at"],
    ["Duration", duration(between(run.acked_at || run.dispatched_at, run.finished_at)), "duration"],
    ["Deadline", time(run.deadline_at), "deadline_at"],
    ["Next attempt", time(run.next_attempt_at), "next_attempt_at"],
    ["Waiting for", text(run.waiting_for), "waiting_for"],
    ["Progress", run.progress ? `${run.progress.percent ?? "–"} %${run.progress.note ? ` · ${run.progress.note}` : ""}` : text(null), "progress"],
    ["Last heartbeat", time(run.heartbeat_at), "heartbeat_at"],
    ["Cancelled by", text(run.cancelled_by), "cancelled_by"],
    ["Fired by node", text(run.fired_by), "fired_by"],
    ["Fire state", run.fire_state ? state(run.fire_state) : text(null), "fire_state"],
  ]));
}

function details(run) {
  return [
    h("h2", {}, "Error"),
    run.error ? h("pre", { class: "mono run-error" }, run.error) : h("p", { class: "muted" }, "No error."),
    h("h2", {}, "Output"),
    h("div", { class: "run-output" }, json(run.output)),
    h("h2", {}, "Payload"),
    json(run.payload),
    h("h2", {}, "Attempt history"),
    table({
      caption: "Attempts that did not succeed, and other events",
      rows: run.history || [],
      empty: "No failed attempt or event recorded.",
      columns: [
        { label: "Attempt", cell: (r) => text(r.attempt) },
        { label: "Event", cell: (r) => text(r.event) },
        { label: "At", cell: (r) => time(r.at) },
        { label: "Consumer", cell: (r) => text(r.consumer) },
        { label: "Error", cell: (r) => text(r.error) },
        { label: "Retry at", cell: (r) => time(r.retry_at) },
      ],
    }),
    (run.items && run.items.length > 1) ? [
      h("h2", {}, "Items of this fire"),
      table({
        caption: "Items of the fire, by shard",
        rows: run.items,
        rowKey: (item) => item.id,
        columns: [
          { label: "Shard", cell: (item) => String(item.shard) },
          { label: "Zone", cell: (item) => text(item.zone) },
          { label: "State", cell: (item) => state(item.state) },
          { label: "Attempt", cell: (item) => String(item.attempt) },
          { label: "Consumer", cell: (item) => text(item.consumer) },
          { label: "Run", cell: (item) => runLink(item.id, run.id) },
        ],
      })] : null,
    run.mode === "broadcast" ? [
      h("h2", {}, "Receipts of the instances"),
      table({
        caption: "One receipt per instance that acked",
        rows: run.instances || [],
        rowKey: (r) => r.instance,
        empty: "No instance has acked this run.",
        columns: [
          { label: "Instance", cell: (r) => r.instance },
          { label: "Attempt", cell: (r) => String(r.attempt) },
          { label: "State", cell: (r) => state(r.state) },
          { label: "Acked", cell: (r) => time(r.acked_at) },
          { label: "Heartbeat", cell: (r) => time(r.heartbeat_at) },
          { label: "Finished", cell: (r) => time(r.finished_at) },
          { label: "Output", cell: (r) => (r.output === null || r.output === undefined ? text(null) : h("code", {}, JSON.stringify(r.output))) },
          { label: "Error", cell: (r) => text(r.error) },
        ],
      })] : null,
  ];
}

function actions(ctx, run, job, reload) {
  const buttons = [];
  if (ctx.can("cancel_runs") && UNFINISHED.includes(run.state)) {
    buttons.push(h("button", {
      type: "button", class: "danger", "data-action": "cancel-run",
      onclick: async () => {
        if (!await confirm(`Cancel run ${run.id}? It is withdrawn and never published again.`, "Cancel run")) return;
        try {
          const answer = await api.post(`/v1/runs/${encodeURIComponent(run.id)}/cancel`);
          toast(`Run cancelled (was ${answer.cancelled_from})${answer.notified ? "" : "; the consumers could not be told"}`);
        } catch (error) {
          toast(error.code === "run_finished" ? `Not cancelled: ${error.message}` : error.message, "error");
        }
        await reload();
      },
    }, "Cancel run"));
  }
  if (run.state === "dead" && job && ctx.can("read_dead_letters")) {
    const queue = `chime.group.${job.target.group}.dlq`;
    buttons.push(h("a", {
      class: "button ghost", "data-nav": "dlq",
      href: `#/dlq/${encodeURIComponent(queue)}?job=${encodeURIComponent(`${job.app}/${job.name}`)}`,
    }, "Replay from the dead-letter queue"));
  }
  return buttons.length ? h("div", { class: "actions" }, buttons) : null;
}

export default async function render(ctx) {
  const id = ctx.params.id;
  let job = null;
  const body = h("div", { class: "run-body" });
  const notice = h("div", { class: "run-notice" });
  fill(ctx.main, h("h1", {}, "Run ", h("span", { class: "mono" }, id.slice(0, 8))),
    h("p", {}, h("a", { href: "#/runs" }, "All runs")), notice, body);

  const load = async () => {
    const run = await api.get(`/v1/runs/${encodeURIComponent(id)}`);
    if (!job) {
      try {
        job = await api.get(`/v1/jobs/${encodeURIComponent(run.job_id)}`);
      } catch {
        job = null; // deleted job: the run is still shown, by its job id.
      }
    }
    if (ctx.stale()) return run;
    const scroll = window.scrollY;
    fill(body, actions(ctx, run, job, load), overview(run, job), details(run));
    window.scrollTo(0, scroll);
    return run;
  };
  const run = await load();
  if (!UNFINISHED.includes(run.state)) return;
  let finished = false;
  ctx.every(2000, async () => {
    if (finished) return;
    try {
      const now = await load();
      finished = !UNFINISHED.includes(now.state);
      fill(notice);
    } catch (error) {
      fill(notice, errorBox(error));
    }
  });
}
