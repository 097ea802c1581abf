// Building blocks every page uses: elements, times, state badges, tables with server-side
// paging, confirmation dialogs, toasts and field errors. No page builds these itself, so
// the console looks and behaves the same everywhere (and is labelled the same way for
// screen readers).

/**
 * An element: h("a", {href: "#/jobs", class: "x", onclick: fn}, "text", child, [more]).
 * Attributes starting with "on" are listeners; `dataset` and boolean attributes work;
 * null/undefined/false children are skipped.
 */
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      element.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(element.dataset, value);
    } else if (key === "value" && "value" in element) {
      element.value = value;
    } else if (value === true) {
      element.setAttribute(key, "");
    } else {
      element.setAttribute(key, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

const LOCAL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit",
});

/** An instant in the viewer's zone, with UTC on hover (and in `datetime`). */
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "–");
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return h("span", {}, iso);
  return h("time", { datetime: iso, title: `${at.toISOString().replace(".000Z", "Z")} UTC` }, LOCAL.format(at));
}

/** "3.2 s", "450 ms", "2 h 5 min" from milliseconds. */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  const abs = Math.abs(ms);
  if (abs < 1000) return `${Math.round(ms)} ms`;
  if (abs < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (abs < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.round((abs % 60_000) / 1000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.round((abs % 3_600_000) / 60_000)} min`;
}

/** Milliseconds between two instants, or null. */
export function between(fromIso, toIso) {
  if (!fromIso || !toIso) return null;
  return new Date(toIso).getTime() - new Date(fromIso).getTime();
}

/** A run (or node, job) state as a labelled badge. */
export function state(name) {
  return h("span", { class: "state", "data-state": name }, name);
}

/** A number with thousands separators. */
export function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString();
}

/** The error box a failed load shows. */
export function errorBox(error) {
  return h("div", { class: "error-box", role: "alert" }, error.message || String(error));
}

/**
 * A table. columns: [{label, cell: row => node|text, sort?: key}]; rows: array.
 * `sort` ({key, desc, onSort}) makes sortable headers buttons with aria-sort.
 */
export function table({ columns, rows, rowKey, empty = "Nothing here.", sort, caption }) {
  if (!rows.length) return h("div", { class: "table-wrap" }, h("p", { class: "empty" }, empty));
  const head = h("tr", {}, columns.map((column) => {
    if (!column.sort || !sort) return h("th", { scope: "col" }, column.label);
    const active = sort.key === column.sort;
    return h("th", { scope: "col", "aria-sort": active ? (sort.desc ? "descending" : "ascending") : "none" },
      h("button", {
        type: "button", class: "sort",
        onclick: () => sort.onSort(column.sort, active ? !sort.desc : false),
      }, column.label, active ? (sort.desc ? " ▼" : " ▲") : ""));
  }));
  const body = rows.map((row) => h("tr", { "data-key": rowKey ? rowKey(row) : null },
    columns.map((column) => h("td", { "data-label": column.label }, column.cell(row)))));
  return h("div", { class: "table-wrap" },
    h("table", {}, caption ? h("caption", { class: "sr-only" }, caption) : null,
      h("thead", {}, head), h("tbody", {}, body)));
}

/**
 * Server-side paging with the API's cursors: "First page" and "Next page" buttons.
 * `next` is the page's next cursor (null on the last); `cursor` is this page's own.
 */
export function pager({ cursor, next, onPage }) {
  return h("nav", { class: "pager", "aria-label": "Pages" },
    h("button", { type: "button", class: "ghost", disabled: !cursor, onclick: () => onPage(null) }, "First page"),
    h("button", { type: "button", class: "ghost", disabled: !next, "data-nav": "next-page", onclick: () => onPage(next) }, "Next page"));
}

/** Asks before a destructive action; resolves true only on the confirm button. */
export function confirm(message, confirmLabel = "Confirm", { danger = true } = {}) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { "aria-labelledby": "confirm-text", class: "confirm" },
      h("p", { id: "confirm-text" }, message),
      h("div", { class: "actions" },
        h("button", { type: "button", class: danger ? "danger" : "", "data-dialog": "confirm", onclick: () => close(true) }, confirmLabel),
        h("button", { type: "button", class: "ghost", "data-dialog": "cancel", onclick: () => close(false) }, "Cancel")));
    function close(answer) {
      dialog.close();
      dialog.remove();
      resolve(answer);
    }
    dialog.addEventListener("cancel", (event) => { event.preventDefault(); close(false); });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** A short message in the corner, read out by screen readers. */
export function toast(message, kind = "ok") {
  const box = document.getElementById("toasts");
  const item = h("div", { class: `toast ${kind === "error" ? "error" : ""}` }, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 9000 : 4000);
}

/**
 * A labelled input: field({label, name, type, value, help, options}) →
 * <label>text <input name> <p class=field-error data-field=name></label>.
 * `options` makes a <select>; type "textarea" a <textarea>.
 */
export function field({ label, name, type = "text", value = "", help, options, attrs = {} }) {
  const id = `f-${name.replace(/[^a-z0-9]/gi, "-")}`;
  const errorId = `${id}-error`;
  let control;
  if (options) {
    control = h("select", { id, name, "aria-describedby": errorId, ...attrs },
      options.map(([optionValue, text]) => h("option", { value: optionValue, selected: String(optionValue) === String(value) }, text)));
  } else if (type === "textarea") {
    control = h("textarea", { id, name, "aria-describedby": errorId, ...attrs });
    control.value = value ?? "";
  } else if (type === "checkbox") {
    control = h("input", { id, name, type, checked: !!value, "aria-describedby": errorId, ...attrs });
  } else {
    control = h("input", { id, name, type, value: value ?? "", "aria-describedby": errorId, ...attrs });
  }
  return h("label", { for: id, class: attrs.wide ? "wide" : null }, label, control,
    help ? h("span", { class: "muted" }, help) : null,
    h("p", { class: "field-error", id: errorId, "data-field": name, hidden: true }));
}

/** Clears every field error of a form. */
export function clearFieldErrors(form) {
  for (const p of form.querySelectorAll(".field-error")) { p.textContent = ""; p.hidden = true; }
  for (const c of form.querySelectorAll("[aria-invalid]")) c.removeAttribute("aria-invalid");
}

/**
 * Shows an API error at the field it names (falling back to the form's own error box).
 * `fieldFor` maps the API's field path (e.g. "schedule.cron") to the form's field name;
 * `focus: false` leaves the focus where the user is typing.
 */
export function showError(form, error, fieldFor = (name) => name, { focus = true } = {}) {
  const name = error.field ? fieldFor(error.field) : null;
  const slot = name && form.querySelector(`.field-error[data-field="${CSS.escape(name)}"]`);
  if (slot) {
    slot.textContent = error.message;
    slot.hidden = false;
    const control = form.querySelector(`[name="${CSS.escape(name)}"]`);
    if (control) {
      control.setAttribute("aria-invalid", "true");
      // A save moves focus to the field at fault; a live check (the schedule preview)
      // must not take the focus, or the user's next keystrokes land in another field.
      if (focus) control.focus();
    }
    return;
  }
  const box = form.querySelector(".form-error") || form.prepend(h("div", { class: "form-error" })) || form.querySelector(".form-error");
  fill(box, errorBox(error));
  box.setAttribute("data-code", error.code || "");
}

/** Shard numbers as ranges: [0,1,2,5,7,8] → "0-2,5,7-8" ("–" for none). */
export function shardRanges(shards) {
  const out = [];
  for (let i = 0; i < shards.length; i++) {
    let j = i;
    while (j + 1 < shards.length && shards[j + 1] === shards[j] + 1) j++;
    out.push(i === j ? `${shards[i]}` : `${shards[i]}-${shards[j]}`);
    i = j;
  }
  return out.join(",") || "–";
}
