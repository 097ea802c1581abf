// The console's shell: signs in, draws the navigation the token may use, routes
// `#/path?query` to a page module and gives the page its context. Pages live in
// ./pages/, one module per page, each exporting `default async function render(ctx)`.
//
// ctx = {
//   main:      the element to fill,
//   params:    route parameters (e.g. {id}),
//   query:     URLSearchParams of the hash's query,
//   me:        GET /v1/me's answer (name, role, apps, actions),
//   can(a):    whether `me.actions` holds action `a` (e.g. "change_jobs"),
//   go(hash):  navigate,
//   setQuery(obj): navigate to this route with another query (re-renders),
//   every(ms, fn): run fn every ms while the page is shown and the tab visible,

// }
import { api, forgetToken, token } from "./api.js";
import { errorBox, fill, h } from "./ui.js";

/** Routes, first match wins: [pattern, module, nav label or null, action needed]. */
const ROUTES = [
  ["/", "overview", "Overview", "read_jobs"],
  ["/jobs", "jobs", "Jobs", "read_jobs"],
  ["/jobs/new", "job_form", null, "change_jobs"],
  ["/jobs/:id/edit", "job_form", null, "change_jobs"],
  ["/jobs/:id", "job_detail", null, "read_jobs"],
  ["/runs", "runs", "Runs", "read_jobs"],
  ["/runs/:id", "run_detail", null, "read_jobs"],
  ["/dlq", "dlq", "Dead letters", "read_dead_letters"],
  ["/dlq/:queue", "dlq", null, "read_dead_letters"],
  ["/cluster", "cluster", "Cluster", "read_cluster"],
  ["/consumers", "consumers", "Consumers", "read_consumers"],
  ["/audit", "audit", "Audit", "read_jobs"],
  ["/tokens", "tokens", "Tokens", "manage_tokens"],
];

let me = null;
let timers = [];
let generation = 0;

function match(path) {
  for (const [pattern, module, , action] of ROUTES) {
    const names = [];
    const regex = new RegExp(`^${pattern.replace(/:([a-z]+)/g, (_, name) => { names.push(name); return "([^/]+)"; })}$`);
    const found = regex.exec(path);
    if (found) {
      const params = {};
      names.forEach((name, i) => { params[name] = decodeURIComponent(found[i + 1]); });
      return { module, params, action };
    }
  }
  return null;
}

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, search = ""] = raw.split("?");
  return { path: path || "/", query: new URLSearchParams(search) };
}

export function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function stopTimers() {
  for (const timer of timers) clearInterval(timer);
  timers = [];
}

function drawNav(path) {
  const nav = document.getElementById("nav");
  fill(nav, ROUTES.filter(([, , label, action]) => label && me.actions.includes(action)).map(([pattern, , label]) => {
    const current = pattern === "/" ? path === "/" : path === pattern || path.startsWith(`${pattern}/`);
    return h("a", { href: `#${pattern}`, "aria-current": current ? "page" : null }, label);
  }));
  nav.classList.remove("open");
  document.getElementById("nav-toggle").setAttribute("aria-expanded", "false");
}

async function route() {
  stopTimers();
  const mine = ++generation;
  const main = document.getElementById("main");
  if (!token()) {
    document.getElementById("top").hidden = true;
    const signin = await import("./pages/signin.js");
    await signin.default({ main, onSignedIn: start });
    return;
  }
  const { path, query } = parseHash();
  const found = match(path);
  drawNav(path);
  if (!found) {
    fill(main, h("section", { class: "page" }, h("h1", {}, "Not found"), h("p", {}, "No page here. "), h("a", { href: "#/" }, "Overview")));
    return;
  }
  const page = h("section", { class: "page", "data-page": found.module });
  fill(main, page);
  if (!me.actions.includes(found.action)) {
    fill(page, h("h1", {}, "Not allowed"), h("p", {}, `Token '${me.name}' (${me.role}) may not open this page.`));
    page.setAttribute("data-ready", "true");
    return;
  }
  const ctx = {
    main: page,
    params: found.params,
    query,
    me,
    can: (action) => me.actions.includes(action),
    go,
    setQuery: (values) => {
      const next = new URLSearchParams();
      for (const [key, value] of Object.entries(values)) {
        if (value !== undefined && value !== null && value !== "") next.set(key, value);
      }
      const text = next.toString();
      go(`#${path}${text ? `?${text}` : ""}`);
    },
    every: (ms, fn) => {
      timers.push(setInterval(() => {
        if (mine === generation && document.visibilityState === "visible") fn();
      }, ms));
    },
    stale: () => mine !== generation,
  };
  try {
    const module = await import(`./pages/${found.module}.js`);
    if (mine !== generation) return;
    await module.default(ctx);
    page.setAttribute("data-ready", "true");
  } catch (error) {
    if (mine !== generation) return;
    page.append(errorBox(error));
    page.setAttribute("data-ready", "true");
  }
}

async function start() {
  try {
    me = await api.get("/v1/me");
  } catch (error) {
    forgetToken();
    me = null;
    const main = document.getElementById("main");
    fill(main, h("section", { class: "page" }, errorBox(error)));
    route();
    return;
  }
  document.getElementById("top").hidden = false;
  fill(document.getElementById("whoami"), `${me.name} · ${me.role}`);
  route();
}

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem("chime.theme", theme);
}

function init() {
  const stored = localStorage.getItem("chime.theme");
  const preferred = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  applyTheme(stored || preferred);
  document.getElementById("theme").addEventListener("click", () => {
    applyTheme(document.documentElement.dataset.theme === "dark" ? "light" : "dark");
  });
  document.getElementById("signout").addEventListener("click", () => {
    forgetToken();
    me = null;
    location.hash = "#/";
    route();
  });
  document.getElementById("nav-toggle").addEventListener("click", (event) => {
    const nav = document.getElementById("nav");
    const open = nav.classList.toggle("open");
    event.currentTarget.setAttribute("aria-expanded", String(open));
  });
  window.addEventListener("hashchange", () => { if (me) route(); });
  window.addEventListener("chime:unauthorized", () => {
    forgetToken();
    me = null;
    route();
  });
  if (token()) start();
  else route();
}

init();
