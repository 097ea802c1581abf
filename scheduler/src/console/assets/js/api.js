// The console's only way to the server: the /v1 API with the tab's token. Every answer
// that is not 2xx becomes an ApiError carrying the API's error body (code, message,
// field), so pages show the API's own words at the field it names. A 401 means the
// token is gone or revoked: the app signs out (the "chime:unauthorized" event).

const TOKEN_KEY = "chime.token";

/** An error answer of the API (or a network failure, status 0). */
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
}

/** The tab's token, or null. Kept in session storage: closing the tab forgets it. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function rememberToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** `?a=1&b=2` from an object, leaving out empty values. */
export function queryString(query) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/**
 * One API call. Resolves to {status, body, headers}; rejects with ApiError.
 * `options.token` overrides the tab's token (the sign-in form checks a new one).
 */
export async function request(method, path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  const bearer = options.token ?? token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let body;
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  let response;
  try {
    response = await fetch(path + queryString(options.query), { method, headers, body, cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, "network", `cannot reach chimed: ${error.message}`);
  }
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (!response.ok) {
    const error = (parsed && parsed.error) || {};
    if (response.status === 401 && !options.token) {
      window.dispatchEvent(new CustomEvent("chime:unauthorized"));
    }
    throw new ApiError(
      response.status,
      error.code || `http_${response.status}`,
      error.message || `chimed answered ${response.status}`,
      error.field,
    );
  }
  return { status: response.status, body: parsed, headers: response.headers };
}

export const api = {
  get: async (path, query) => (await request("GET", path, { query })).body,
  post: async (path, body) => (await request("POST", path, { body: body ?? {} })).body,
  patch: async (path, body, headers) => (await request("PATCH", path, { body, headers })).body,
  delete: async (path) => (await request("DELETE", path)).body,
};
