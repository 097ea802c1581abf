// Sign-in: the operator pastes an API token (`chimectl token create`, or the bootstrap
// admin token's file). The token is checked with GET /v1/me before it is kept.
import { rememberToken, request } from "../api.js";
import { clearFieldErrors, field, fill, h, showError } from "../ui.js";

export default async function render({ main, onSignedIn }) {
  const form = h("form", { "aria-labelledby": "signin-title", novalidate: true },
    h("div", { class: "form-error" }),
    field({ label: "API token", name: "token", type: "password", attrs: { autocomplete: "current-password", required: true } }),
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    const value = form.elements.token.value.trim();
    if (!value) {
      showError(form, { field: "token", message: "paste an API token" });
      return;
    }
    try {
      await request("GET", "/v1/me", { token: value });
    } catch (error) {
      showError(form, { ...error, field: "token", message: error.status === 401 ? "this token is not valid (unknown, revoked or mistyped)" : error.message });
      return;
    }
    rememberToken(value);
    onSignedIn();
  });
  fill(main, h("section", { class: "page signin", "data-page": "signin" },
    h("h1", { id: "signin-title" }, "Sign in to Chime"),
    h("p", { class: "muted" }, "Paste an API token. It stays in this tab only and is sent to this chimed alone."),
    form));
  form.elements.token.focus();
  main.firstChild.setAttribute("data-ready", "true");
}
