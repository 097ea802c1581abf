// Page "dlq": the dead-letter queues (GET /v1/dlq) with depth, oldest age, reasons
// tallied and resolved letters; `#/dlq/<queue>` peeks at one queue's head messages
// (GET /v1/dlq/{queue}/messages, left in place) with payload and history, resolved
// letters marked, and replays (all, or one job's: `?job=app/name`) or purges it, each
// after a confirmation. Depths refresh live.
import { api } from "../api.js";
import { confirm, count, duration, errorBox, field, fill, h, state, table, time, toast } from "../ui.js";

function reasons(tally) {
  const entries = Object.entries(tally || {}).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return h("span", { class: "muted" }, "–");
  return h("ul", { class: "dlq-reasons" }, entries.map(([reason, n]) =>
    h("li", {}, h("span", { class: "dlq-count" }, `${count(n)} ×`), " ", reason)));
}

function queueTable(items) {
  return table({
    caption: "Dead-letter queues",
    rowKey: (q) => q.queue,
    empty: "No dead-letter queue exists yet.",
    rows: items,
    columns: [
      { label: "Queue", cell: (q) => h("a", { href: `#/dlq/${encodeURIComponent(q.queue)}`, class: "mono" }, q.queue) },
      { label: "Depth", cell: (q) => h("span", { "data-depth": q.queue }, count(q.depth)) },
      { label: "Oldest", cell: (q) => (q.oldest_age_s === null || q.oldest_age_s === undefined ? h("span", { class: "muted" }, "–") : duration(q.oldest_age_s * 1000)) },
      { label: "Reasons (oldest 100)", cell: (q) => reasons(q.reasons) },
      { label: "Resolved", cell: (q) => count(q.resolved) },
    ],
  });
}

async function renderList(ctx) {
  const list = h("div", { "aria-live": "polite" });
  fill(ctx.main, h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Runs Chime gave up on and tasks RabbitMQ dead-lettered, by queue. Open a queue to read its messages, replay or purge it."),
    list);
  const load = async () => {
    const answer = await api.get("/v1/dlq");
    if (!ctx.stale()) fill(list, queueTable(answer.items));
  };
  await load();
  ctx.every(3000, () => load().catch((error) => fill(list, errorBox(error))));
}

function messageView(message, index, job) {
  return h("article", {
    class: "panel dlq-message", "data-run": message.run_id || null,
    "data-resolved": String(!!message.resolved), "data-of-job": job && message.job === job ? "true" : null,
  },
    h("h3", {}, `#${index + 1} `, message.kind === "dead_letter" ? "dead letter" : message.kind,
      message.resolved ? h("span", { class: "state", "data-state": "succeeded", title: "The run has since succeeded: nothing to replay; purge it." }, "resolved") : null),
    h("dl", { class: "facts" },
      h("dt", {}, "Reason"), h("dd", { class: "dlq-reason" }, message.reason || "–"),
      h("dt", {}, "Job"), h("dd", {}, message.job || "–"),
      h("dt", {}, "Run"), h("dd", {}, message.run_id ? h("a", { href: `#/runs/${encodeURIComponent(message.run_id)}`, class: "mono" }, message.run_id) : "–"),
      h("dt", {}, "Attempt"), h("dd", {}, message.attempt ?? "–"),
      h("dt", {}, "Dead at"), h("dd", {}, time(message.dead_at))),
    message.payload !== null && message.payload !== undefined ? [h("h4", {}, "Payload"), h("pre", { class: "mono" }, JSON.stringify(message.payload, null, 2))] : null,
    message.body ? [h("h4", {}, "Body (excerpt)"), h("pre", { class: "mono" }, message.body)] : null,
    (message.history && message.history.length) ? [h("h4", {}, "History"), table({
      caption: "The run's attempts",
      rows: message.history,
      columns: [
        { label: "Attempt", cell: (r) => String(r.attempt ?? "–") },
        { label: "Event", cell: (r) => (r.event ? state(r.event) : "–") },
        { label: "At", cell: (r) => time(r.at) },
        { label: "Consumer", cell: (r) => r.consumer || "–" },
        { label: "Error", cell: (r) => r.error || "–" },
      ],
    })] : null);
}

function resultText(answer) {
  const skipped = Object.entries(answer.skipped || {}).map(([why, n]) => `${n} skipped (${why})`);
  return [`${answer.replayed} replayed`, `${answer.discarded} discarded`, ...skipped, `${answer.remaining} remaining`].join(", ");
}

async function renderQueue(ctx) {
  const queue = ctx.params.queue;
  const path = `/v1/dlq/${encodeURIComponent(queue)}`;
  const job = ctx.query.get("job") || "";
  const limit = ctx.query.get("limit") || "20";
  const summary = h("div", { "aria-live": "polite" });
  const messages = h("div", { class: "dlq-messages" });
  const buttons = [];
  const refresh = async () => {
    await Promise.all([loadSummary(), loadMessages()]);
  };
  if (ctx.can("replay_queue")) {
    buttons.push(h("button", { type: "button", "data-action": "replay", onclick: async () => {
      if (!await confirm(`Replay every message of ${queue}? Each dead run is published again as its next attempt.`, "Replay all", { danger: false })) return;
      await act(() => api.post(`${path}/replay`, {}), resultText);
    } }, "Replay all"));
  }
  if (job && ctx.can("replay_job_dead_letters")) {
    buttons.push(h("button", { type: "button", "data-action": "replay-job", onclick: async () => {
      if (!await confirm(`Replay the messages of job ${job} in ${queue}?`, `Replay ${job}`, { danger: false })) return;
      await act(() => api.post(`${path}/replay`, { job }), resultText);
    } }, `Replay job ${job}`));
  }
  if (ctx.can("purge_queue")) {
    buttons.push(h("button", { type: "button", class: "danger", "data-action": "purge", onclick: async () => {
      if (!await confirm(`Purge ${queue}? Every message in it is deleted for good.`, "Purge")) return;
      await act(() => api.post(`${path}/purge`, {}), (answer) => `${answer.purged} purged`);
    } }, "Purge queue"));
  }
  async function act(call, describe) {
    try {
      toast(describe(await call()));
    } catch (error) {
      toast(error.message, "error");
    }
    await refresh().catch((error) => fill(messages, errorBox(error)));
  }

  const filter = h("form", { class: "toolbar", role: "search", "aria-label": "Filter messages" },
    field({ label: "Replay by job (app/name)", name: "job", value: job }),
    field({ label: "Messages to read", name: "limit", value: limit, options: [["10", "10"], ["20", "20"], ["50", "50"], ["100", "100"]] }),
    h("button", { type: "submit", "data-nav": "filter" }, "Show"));
  filter.addEventListener("submit", (event) => {
    event.preventDefault();
    ctx.setQuery({ job: filter.elements.job.value.trim(), limit: filter.elements.limit.value });
  });

  fill(ctx.main, h("h1", {}, "Dead letters: ", h("span", { class: "mono" }, queue)),
    h("p", {}, h("a", { href: "#/dlq" }, "All queues")),
    summary, buttons.length ? h("div", { class: "actions" }, buttons) : null,
    filter, h("h2", {}, "Messages at the head of the queue"), messages);

  async function loadSummary() {
    const answer = await api.get("/v1/dlq");
    if (ctx.stale()) return;
    const mine = answer.items.filter((q) => q.queue === queue);
    fill(summary, mine.length ? queueTable(mine) : h("p", { class: "muted" }, "This queue does not exist (yet)."));
  }
  async function loadMessages() {
    const answer = await api.get(`${path}/messages`, { limit });
    if (ctx.stale()) return;
    fill(messages, answer.items.length
      ? answer.items.map((m, i) => messageView(m, i, job))
      : h("p", { class: "empty" }, "The queue is empty."),
    answer.items.length >= Number(limit) ? h("p", { class: "muted" }, `Showing the first ${limit} messages; more may follow.`) : null);
  }

  await refresh();
  ctx.every(3000, () => loadSummary().catch((error) => fill(summary, errorBox(error))));
}

export default async function render(ctx) {
  if (ctx.params.queue) await renderQueue(ctx);
  else await renderList(ctx);
}
