// Page "cluster" (`#/cluster`): the nodes of the cluster and the shards each holds, as
// GET /v1/cluster answers: liveness, shard ranges and count, heartbeat, start, address,
// the shards no live node holds and the lease ttl. Refreshes in place every 5 s.
import { api } from "../api.js";
import { count, errorBox, fill, h, shardRanges, state, table, time } from "../ui.js";

function draw(cluster) {
  const live = cluster.nodes.filter((n) => n.live).length;
  return [
    h("div", { class: "cards" },
      h("div", { class: "card", "data-card": "nodes" }, h("div", { class: "label" }, "Nodes live"), h("div", { class: "value" }, `${live} / ${cluster.nodes.length}`)),
      h("div", { class: "card", "data-card": "unowned" }, h("div", { class: "label" }, "Unowned shards"), h("div", { class: "value" }, count(cluster.unowned_shards.length)),
        h("div", { class: "muted" }, shardRanges(cluster.unowned_shards))),
      h("div", { class: "card", "data-card": "shard-count" }, h("div", { class: "label" }, "Shards"), h("div", { class: "value" }, count(cluster.shard_count))),
      h("div", { class: "card", "data-card": "lease-ttl" }, h("div", { class: "label" }, "Lease ttl"), h("div", { class: "value" }, `${cluster.lease_ttl_s} s`))),
    h("p", { class: "muted" }, `Backend ${cluster.backend}; answered by node `, h("code", {}, cluster.this_node), "."),
    table({
      caption: "Nodes",
      rows: cluster.nodes,
      rowKey: (n) => n.id,
      empty: "No node registered.",
      columns: [
        { label: "Node", cell: (n) => h("code", {}, n.id) },
        { label: "Live", cell: (n) => state(n.live ? "live" : "down") },
        { label: "Shards", cell: (n) => h("span", { class: "mono" }, shardRanges(n.shards)) },
        { label: "Count", cell: (n) => count(n.shards.length) },
        { label: "Heartbeat", cell: (n) => time(n.heartbeat_at) },
        { label: "Started", cell: (n) => time(n.started_at) },
        { label: "Address", cell: (n) => n.http_addr ? h("code", {}, n.http_addr) : h("span", { class: "muted" }, "–") },
      ],
    }),
  ];
}

export default async function render(ctx) {
  const box = h("div", { "data-section": "cluster" });
  ctx.main.append(h("h1", {}, "Cluster"), box);
  async function refresh() {
    try {
      const cluster = await api.get("/v1/cluster");
      if (!ctx.stale()) fill(box, draw(cluster));
    } catch (error) {
      if (!ctx.stale()) fill(box, errorBox(error));
    }
  }
  await refresh();
  ctx.every(5000, refresh);
}
