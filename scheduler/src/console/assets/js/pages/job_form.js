// Page "job_form" (#/jobs/new, #/jobs/:id/edit): every field POST /v1/jobs takes. The
// form's field names are the API's field paths (`schedule.cron`, `target.shards`,
// `backoff.initial`), so an API error lands at its field. The schedule's next fires are
// previewed as the user types (POST /v1/schedules/preview). Editing sends PATCH with
// If-Match: the version read; a 409 version_conflict says someone else changed the job.
import { api, request } from "../api.js";
import { clearFieldErrors, field, fill, h, showError, time, toast } from "../ui.js";

const KINDS = [["cron", "Cron"], ["every", "Every (interval)"], ["at", "Once (at an instant)"]];
const MODES = [["group", "group"], ["broadcast", "broadcast"], ["zone", "zone"], ["sharded", "sharded"]];
const MISFIRE = [["fire_once", "fire_once"], ["skip", "skip"], ["catch_up", "catch_up"]];
const OVERLAP = [["allow", "allow"], ["forbid", "forbid"], ["buffer_one", "buffer_one"]];
/** Optional fields a PATCH clears with null when emptied. */
const CLEARABLE = ["start_at", "end_at", "jitter", "pause_after_failures"];

/** The form field an API field path belongs to. */
export function fieldFor(kind) {
  return (path) => {
    if (path === "schedule") return `schedule.${kind()}`;
    if (path.startsWith("target.zones")) return "target.zones";
    if (path === "backoff") return "backoff.initial";
    if (path === "body" || path === "version" || path === "If-Match") return null;
    return path;
  };
}

function section(title, ...children) {
  return h("fieldset", { class: "panel form-grid" }, h("legend", {}, title), children);
}

export default async function render(ctx) {
  const { main, params } = ctx;
  const editing = params.id ? await api.get(`/v1/jobs/${encodeURIComponent(params.id)}`) : null;
  const job = editing || {};
  const schedule = job.schedule || { every: "1m" };
  const target = job.target || { mode: "group" };
  const backoff = job.backoff || {};
  const kindNow = schedule.cron ? "cron" : schedule.at ? "at" : "every";

  const preview = h("div", { class: "preview", "aria-live": "polite", "data-preview": "" });
  const form = h("form", { class: "job-form", novalidate: true, "aria-labelledby": "job-form-title" },
    h("div", { class: "form-error" }),
    section("Job",
      field({ label: "App", name: "app", value: job.app ?? "default" }),
      field({ label: "Name", name: "name", value: job.name ?? "", attrs: { required: true } })),
    section("Schedule",
      field({ label: "Kind", name: "schedule.kind", value: kindNow, options: KINDS }),
      field({ label: "Cron expression", name: "schedule.cron", value: schedule.cron ?? "", help: "sec min hour day month weekday [year], or a 5-field line", attrs: { "data-kind": "cron" } }),
      field({ label: "Time zone", name: "schedule.timezone", value: schedule.timezone ?? "UTC", attrs: { "data-kind": "cron" } }),
      field({ label: "Every", name: "schedule.every", value: schedule.every ?? "", help: "e.g. 30s, 5m, 1h", attrs: { "data-kind": "every" } }),
      field({ label: "At", name: "schedule.at", value: schedule.at ?? "", help: "RFC 3339, e.g. 2026-12-01T08:00:00Z", attrs: { "data-kind": "at" } }),
      field({ label: "Start at", name: "start_at", value: job.start_at ?? "", help: "optional RFC 3339 instant" }),
      field({ label: "End at", name: "end_at", value: job.end_at ?? "", help: "optional RFC 3339 instant" }),
      field({ label: "Jitter", name: "jitter", value: job.jitter ?? "", help: "optional, 0s – 1h" }),
      h("div", { class: "wide" }, h("h2", {}, "Next fires"), preview)),
    section("Target",
      field({ label: "Group", name: "target.group", value: target.group ?? "" }),
      field({ label: "Mode", name: "target.mode", value: target.mode ?? "group", options: MODES }),
      field({ label: "Zones", name: "target.zones", value: (target.zones || []).join(", "), help: "zone mode: comma-separated, empty for every live zone" }),
      field({ label: "Shards", name: "target.shards", type: "number", value: target.shards ?? "", help: "sharded mode: items per fire" })),
    section("Payload",
      field({ label: "Payload (JSON)", name: "payload", type: "textarea", value: job.payload === undefined || job.payload === null ? "" : JSON.stringify(job.payload, null, 2), attrs: { wide: true, rows: 6, spellcheck: "false" } })),
    section("Delivery",
      field({ label: "Ack timeout", name: "ack_timeout", value: job.ack_timeout ?? "30s" }),
      field({ label: "Run timeout", name: "run_timeout", value: job.run_timeout ?? "5m" }),
      field({ label: "Max attempts", name: "max_attempts", type: "number", value: job.max_attempts ?? 5 }),
      field({ label: "Backoff initial", name: "backoff.initial", value: backoff.initial ?? "1s" }),
      field({ label: "Backoff max", name: "backoff.max", value: backoff.max ?? "5m" }),
      field({ label: "Misfire", name: "misfire", value: job.misfire ?? "fire_once", options: MISFIRE }),
      field({ label: "Catch-up limit", name: "catch_up_limit", type: "number", value: job.catch_up_limit ?? 10 }),
      field({ label: "Overlap", name: "overlap", value: job.overlap ?? "allow", options: OVERLAP }),
      field({ label: "Pause after failures", name: "pause_after_failures", type: "number", value: job.pause_after_failures ?? "", help: "optional: pause after N dead runs in a row" }),
      field({ label: "Paused", name: "paused", type: "checkbox", value: !!job.paused })),
    h("div", { class: "actions" },
      h("button", { type: "submit", "data-action": "save" }, editing ? "Save changes" : "Create job"),
      h("a", { href: editing ? `#/jobs/${encodeURIComponent(job.id)}` : "#/jobs", class: "button ghost", "data-nav": "back" }, "Back")));

  const el = (name) => form.elements[name];
  const kind = () => el("schedule.kind").value;
  function showKind() {
    for (const control of form.querySelectorAll("[data-kind]")) {
      control.closest("label").hidden = control.dataset.kind !== kind();
    }
  }
  showKind();

  function scheduleBody() {
    const k = kind();
    if (k === "cron") {
      const body = { cron: el("schedule.cron").value.trim() };
      const zone = el("schedule.timezone").value.trim();
      if (zone) body.timezone = zone;
      return body;
    }
    return { [k]: el(`schedule.${k}`).value.trim() };
  }

  const text = (name) => el(name).value.trim();
  const number = (name) => (text(name) === "" ? null : Number(text(name)));

  /** The job as the API takes it; throws a field error for JSON that does not parse. */
  function body() {
    const out = {
      app: text("app") || "default",
      name: text("name"),
      schedule: scheduleBody(),
      target: { group: text("target.group"), mode: el("target.mode").value },
      ack_timeout: text("ack_timeout"),
      run_timeout: text("run_timeout"),
      max_attempts: number("max_attempts"),
      backoff: { initial: text("backoff.initial"), max: text("backoff.max") },
      misfire: el("misfire").value,
      catch_up_limit: number("catch_up_limit"),
      overlap: el("overlap").value,
      paused: el("paused").checked,
    };
    const zones = text("target.zones");
    if (zones) out.target.zones = zones.split(",").map((z) => z.trim()).filter(Boolean);
    if (text("target.shards") !== "") out.target.shards = number("target.shards");
    const payload = el("payload").value.trim();
    if (payload) {
      try {
        out.payload = JSON.parse(payload);
      } catch (error) {
        throw { field: "payload", message: `not JSON: ${error.message}` };
      }
    } else if (editing) {
      out.payload = null;
    }
    for (const name of CLEARABLE) {
      const value = name === "pause_after_failures" ? number(name) : text(name);
      if (value !== null && value !== "") out[name] = value;
      else if (editing && job[name] !== undefined && job[name] !== null) out[name] = null;
    }
    return out;
  }

  // Live preview of the schedule, debounced.
  let timer = null;
  let asked = 0;
  const previewFields = ["schedule.cron", "schedule.timezone", "schedule.every", "schedule.at", "start_at", "end_at", "jitter"];
  async function refreshPreview() {
    const mine = ++asked;
    const request = { schedule: scheduleBody(), count: 5 };
    for (const name of ["start_at", "end_at", "jitter"]) if (text(name)) request[name] = text(name);
    try {
      const answer = await api.post("/v1/schedules/preview", request);
      if (mine !== asked || ctx.stale()) return;
      for (const name of previewFields) clearOne(name);
      fill(preview,
        h("p", { "data-description": "" }, answer.description),
        answer.fires.length
          ? h("ol", { class: "fires" }, answer.fires.map((f) => h("li", {}, time(f.at), h("span", { class: "muted" }, ` · ${f.local} (${answer.timezone})`))))
          : h("p", { class: "muted" }, "This schedule fires no more."));
    } catch (error) {
      if (mine !== asked || ctx.stale()) return;
      for (const name of previewFields) clearOne(name);
      fill(preview, h("p", { class: "muted" }, "No preview: fix the schedule."));
      showError(form, error, fieldFor(kind), { focus: false });
    }
  }
  function clearOne(name) {
    const slot = form.querySelector(`.field-error[data-field="${CSS.escape(name)}"]`);
    if (slot) { slot.textContent = ""; slot.hidden = true; }
    el(name)?.removeAttribute("aria-invalid");
  }
  function schedulePreview() {
    clearTimeout(timer);
    timer = setTimeout(refreshPreview, 400);
  }
  for (const name of [...previewFields, "schedule.kind"]) {
    el(name).addEventListener("input", schedulePreview);
  }
  el("schedule.kind").addEventListener("change", () => { showKind(); schedulePreview(); });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    fill(form.querySelector(".form-error"));
    let payload;
    try {
      payload = body();
    } catch (error) {
      showError(form, error);
      return;
    }
    const button = form.querySelector("[data-action=save]");
    button.disabled = true;
    try {
      if (editing) {
        await request("PATCH", `/v1/jobs/${encodeURIComponent(job.id)}`, { body: payload, headers: { "If-Match": `"${job.version}"` } });
        toast(`Saved ${payload.app}/${payload.name}`);
        ctx.go(`#/jobs/${encodeURIComponent(job.id)}`);
      } else {
        const created = await api.post("/v1/jobs", payload);
        toast(`Created ${created.app}/${created.name}`);
        ctx.go(`#/jobs/${encodeURIComponent(created.id)}`);
      }
    } catch (error) {
      button.disabled = false;
      if (error.code === "version_conflict") {
        const box = form.querySelector(".form-error");
        fill(box, h("div", { class: "error-box", role: "alert", "data-conflict": "" },
          h("p", {}, "This job was changed by someone else since you opened it. Your changes were not saved."),
          h("p", { class: "muted" }, error.message),
          h("button", { type: "button", "data-nav": "reload", onclick: () => ctx.go(`#/jobs/${encodeURIComponent(job.id)}/edit`) }, "Reload the job (drops your changes)")));
        box.scrollIntoView({ block: "nearest" });
        return;
      }
      showError(form, error, fieldFor(kind));
    }
  });

  fill(main,
    h("h1", { id: "job-form-title" }, editing ? `Edit ${job.app}/${job.name}` : "New job"),
    editing ? h("p", { class: "muted" }, `Version ${job.version}`) : null,
    form);
  await refreshPreview();
}

