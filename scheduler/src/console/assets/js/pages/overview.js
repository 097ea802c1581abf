// Page "overview" (`#/`): the last hour at a glance for on-call. Fires per second,
// lateness percentiles, results by state, retries and dead letters (GET /v1/stats/runs),
// per-minute bars of fires and failures, cluster health (GET /v1/cluster), groups with
// queued work and no consumer (GET /v1/consumers) and dead-letter depth (GET /v1/dlq).
// Each section shows only when the token may read it; the page refreshes in place every 5 s.
import { api } from "../api.js";
import { count, duration, errorBox, fill, h, shardRanges, state } from "../ui.js";

const STATES = ["scheduled", "dispatched", "acked", "succeeded", "failed", "dead", "cancelled"];

function card(label, value, key, note) {
  return h("div", { class: "card", "data-card": key },
    h("div", { class: "label" }, label),
    h("div", { class: "value" }, value),
    note ? h("div", { class: "muted" }, note) : null);
}

function percentiles(lateness) {
  const ms = (v) => (v === null || v === undefined ? "–" : duration(v));
  return `${ms(lateness.p50)} / ${ms(lateness.p95)} / ${ms(lateness.p99)}`;
}

/** Per-bucket bars, heights through CSSOM (CSP allows it; a style attribute it does not). */
function bars(buckets, key, label, bad) {
  const peak = Math.max(0, ...buckets.map((b) => b[key]));
  const max = Math.max(1, peak);
  const chart = h("div", { class: "bars", role: "img", "aria-label": `${label} per minute, last hour (highest ${peak})`, "data-bars": key },
    buckets.map((bucket) => {
      const bar = h("div", { class: bad ? "bar bad" : "bar", title: `${new Date(bucket.at).toLocaleTimeString()}: ${bucket[key]}` });
      bar.style.height = `${(bucket[key] / max) * 100}%`;
      return bar;
    }));
  return h("div", { class: "panel" }, h("h3", {}, label, h("span", { class: "muted" }, ` · peak ${count(peak)}/min`)), chart);
}

function statsSection(stats) {
  const t = stats.totals;
  const failures = stats.buckets.map((b) => ({ ...b, failures: b.failed + b.dead }));
  return [
    h("h2", {}, "Last hour"),
    h("div", { class: "cards" },
      card("Fired", count(t.fired), "fired", `${t.fires_per_s} per second`),
      card("Lateness p50 / p95 / p99", percentiles(t.lateness_ms), "lateness", "dispatch vs fire time"),
      card("Retried", count(t.retried), "retried", "runs past attempt 1"),
      card("Dead", count(t.dead), "dead", "gave up, in a DLQ")),
    h("div", { class: "panel" }, h("h3", {}, "Results by state"),
      h("dl", { class: "facts by-state" }, STATES.flatMap((name) => [h("dt", {}, state(name)), h("dd", { "data-state-count": name }, count(t.by_state[name]))]))),
    h("div", { class: "ops-charts" },
      bars(stats.buckets, "fired", "Fires", false),
      bars(failures, "failures", "Failures (failed + dead)", true)),
  ];
}

function clusterSection(cluster) {
  const live = cluster.nodes.filter((n) => n.live).length;
  const unowned = cluster.unowned_shards.length;
  return [
    h("h2", {}, h("a", { href: "#/cluster" }, "Cluster")),
    h("div", { class: "cards" },
      card("Nodes live", `${live} / ${cluster.nodes.length}`, "nodes", cluster.backend),
      card("Unowned shards", count(unowned), "unowned", unowned ? shardRanges(cluster.unowned_shards) : `of ${cluster.shard_count}, all held`)),
  ];
}

function consumersSection(consumers) {
  const unattended = consumers.groups.filter((g) => g.unattended);
  return [
    h("h2", {}, h("a", { href: "#/consumers" }, "Groups without a consumer")),
    unattended.length
      ? h("ul", { class: "ops-alerts" }, unattended.map((g) => h("li", { "data-group": g.group },
        h("strong", {}, g.group), `: ${count(g.queued)} queued, no live consumer`)))
      : h("p", { class: "muted", "data-empty": "unattended" }, "Every group with queued work has a live consumer."),
  ];
}

function dlqSection(dlq) {
  const total = dlq.items.reduce((sum, q) => sum + q.depth, 0);
  const nonEmpty = dlq.items.filter((q) => q.depth > 0);
  return [
    h("h2", {}, h("a", { href: "#/dlq" }, "Dead letters")),
    h("div", { class: "cards" }, card("Messages in DLQs", count(total), "dlq-total", `${dlq.items.length} queues`)),
    nonEmpty.length
      ? h("ul", { class: "ops-alerts" }, nonEmpty.map((q) => h("li", {},
        h("a", { href: `#/dlq/${encodeURIComponent(q.queue)}` }, q.queue), `: ${count(q.depth)}`)))
      : null,
  ];
}

export default async function render(ctx) {
  const sections = {
    stats: ctx.can("read_run_stats") && { box: h("section", { "data-section": "stats" }), load: () => api.get("/v1/stats/runs", { minutes: 60 }), draw: statsSection },
    cluster: ctx.can("read_cluster") && { box: h("section", { "data-section": "cluster" }), load: () => api.get("/v1/cluster"), draw: clusterSection },
    consumers: ctx.can("read_consumers") && { box: h("section", { "data-section": "consumers" }), load: () => api.get("/v1/consumers"), draw: consumersSection },
    dlq: ctx.can("read_dead_letters") && { box: h("section", { "data-section": "dlq" }), load: () => api.get("/v1/dlq"), draw: dlqSection },
  };
  const shown = Object.values(sections).filter(Boolean);
  ctx.main.append(h("h1", {}, "Overview"), ...shown.map((s) => s.box));

  async function refresh() {
    await Promise.all(shown.map(async (section) => {
      try {
        const data = await section.load();
        if (!ctx.stale()) fill(section.box, section.draw(data));
      } catch (error) {
        if (!ctx.stale()) fill(section.box, errorBox(error));
      }
    }));
  }
  await refresh();
  ctx.every(5000, refresh);
}
