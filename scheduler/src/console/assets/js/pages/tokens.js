// Page "tokens" (`#/tokens`, admin only): the API tokens (GET /v1/tokens, revoked ones
// included, never their secrets), a form to create one (POST /v1/tokens: its secret is
// shown once, with a copy button and a warning) and revocation (DELETE /v1/tokens/{name})
// after a confirmation.
import { api } from "../api.js";
import { clearFieldErrors, confirm, errorBox, field, fill, h, showError, state, table, time, toast } from "../ui.js";

function secretBox(created) {
  const value = h("input", { id: "token-secret", name: "secret", type: "text", readonly: true, value: created.token, class: "mono", "aria-describedby": "token-secret-warning" });
  const copy = h("button", { type: "button", class: "ghost", "data-nav": "copy-secret", onclick: async () => {
    value.select();
    try {
      await navigator.clipboard.writeText(created.token);
      toast("Secret copied.");
    } catch {
      toast("Copy refused by the browser: select the text and copy it.", "error");
    }
  } }, "Copy");
  return h("div", { class: "panel token-secret", role: "status" },
    h("h2", {}, `Token '${created.name}' created`),
    h("p", { id: "token-secret-warning", class: "warning" },
      "This secret is shown once and never again: copy it now and keep it somewhere safe. Lost, it can only be revoked and replaced."),
    h("label", { for: "token-secret" }, "Secret", value),
    h("div", { class: "actions" }, copy,
      h("button", { type: "button", class: "ghost", "data-dialog": "dismiss-secret", onclick: (event) => event.currentTarget.closest(".token-secret").remove() }, "I have copied it")));
}

export default async function render(ctx) {
  const secret = h("div", { "data-section": "secret" });
  const list = h("div", { "data-section": "tokens" });
  const form = h("form", { class: "panel", "aria-labelledby": "token-create-title", novalidate: true },
    h("h2", { id: "token-create-title" }, "Create a token"),
    h("div", { class: "form-error" }),
    h("div", { class: "form-grid" },
      field({ label: "Name", name: "name", help: "1 to 64 of A-Z a-z 0-9 . _ -", attrs: { required: true, autocomplete: "off" } }),
      field({ label: "Role", name: "role", value: "reader", options: [["reader", "reader: reads everything"], ["operator", "operator: also changes jobs, runs, DLQs"], ["admin", "admin: also manages tokens"]] }),
      field({ label: "Apps", name: "apps", value: "*", help: "comma-separated app names, or * for every app" })),
    h("div", { class: "actions" }, h("button", { type: "submit", "data-action": "create" }, "Create token")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    fill(form.querySelector(".form-error"));
    const apps = form.elements.apps.value.split(",").map((a) => a.trim()).filter(Boolean);
    try {
      const created = await api.post("/v1/tokens", { name: form.elements.name.value.trim(), role: form.elements.role.value, apps });
      fill(secret, secretBox(created));
      form.reset();
      toast(`Token '${created.name}' created.`);
      await load();
      secret.querySelector("input").focus();
    } catch (error) {
      showError(form, error, (name) => name.split(".")[0].split("[")[0]);
    }
  });

  async function revoke(token) {
    if (!(await confirm(`Revoke token '${token.name}'? Every node refuses it within 2 s; this cannot be undone.`, "Revoke"))) return;
    try {
      await api.delete(`/v1/tokens/${encodeURIComponent(token.name)}`);
      toast(`Token '${token.name}' revoked.`);
    } catch (error) {
      toast(error.message, "error");
    }
    await load();
  }

  async function load() {
    try {
      const page = await api.get("/v1/tokens");
      if (ctx.stale()) return;
      fill(list, table({
        caption: "API tokens",
        rows: page.items,
        rowKey: (t) => t.name,
        empty: "No token.",
        columns: [
          { label: "Name", cell: (t) => h("strong", {}, t.name) },
          { label: "Role", cell: (t) => t.role },
          { label: "Apps", cell: (t) => (t.apps || []).join(", ") || "*" },
          { label: "Created", cell: (t) => [time(t.created_at), t.created_by ? h("span", { class: "muted" }, ` by ${t.created_by}`) : null] },
          { label: "Revoked", cell: (t) => (t.revoked_at ? [state("revoked"), " ", time(t.revoked_at)] : h("span", { class: "muted" }, "–")) },
          { label: "", cell: (t) => (t.revoked_at || !ctx.can("manage_tokens") ? null
            : h("button", { type: "button", class: "danger", "data-action": "revoke", "data-token": t.name, onclick: () => revoke(t) }, "Revoke")) },
        ],
      }));
    } catch (error) {
      if (!ctx.stale()) fill(list, errorBox(error));
    }
  }

  ctx.main.append(h("h1", {}, "API tokens"), secret);
  if (ctx.can("manage_tokens")) ctx.main.append(form);
  ctx.main.append(h("h2", {}, "Tokens"), list);
  await load();
}

