// Every request of the console goes through api(): one place adds the signed-in
// user's Authorization header (Basic credentials or a bearer token kept in
// sessionStorage), parses JSON and turns laketail's error bodies
// ({"error_code", "message": "KAFKA_NAME: ..."}) into ApiError.

const AUTH_KEY = "laketail.console.auth";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function credentials() {
  try {
    return JSON.parse(sessionStorage.getItem(AUTH_KEY) || "null");
  } catch {
    return null;
  }
}

export function signIn(kind, user, secret) {
  const value = kind === "bearer" ? { kind, token: secret } : { kind: "basic", user, password: secret };
  sessionStorage.setItem(AUTH_KEY, JSON.stringify(value));
}

export function signOut() {
  sessionStorage.removeItem(AUTH_KEY);
}

function authorization() {
  const c = credentials();
  if (!c) return null;
  if (c.kind === "bearer") return `Bearer ${c.token}`;
  const bytes = new TextEncoder().encode(`${c.user}:${c.password}`);
  return "Basic " + btoa(String.fromCharCode(...bytes));
}

export async function api(path, { method = "GET", body, headers = {}, raw = false } = {}) {
  // X-Requested-With: a refused request comes back without a WWW-Authenticate challenge,
  // so the browser leaves the sign-in to the console's own form
  const h = { Accept: "application/json", "X-Requested-With": "laketail-console", ...headers };
  const auth = authorization();
  if (auth) h.Authorization = auth;
  let payload;
  if (body !== undefined) {
    payload = typeof body === "string" ? body : JSON.stringify(body);
    if (!h["Content-Type"]) h["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, { method, headers: h, body: payload });
  if (raw) return resp;
  const text = await resp.text();
  let doc = null;
  if (text) {
    try {
      doc = JSON.parse(text);
    } catch {
      doc = text;
    }
  }
  if (resp.status === 401 && location.hash !== "#/signin") location.hash = "#/signin";
  if (!resp.ok) {
    const message = doc && doc.message ? doc.message : `HTTP ${resp.status}`;
    throw new ApiError(resp.status, doc && doc.error_code, message);
  }
  return doc;
}

let clusterId = null;

export async function cluster() {
  if (!clusterId) {
    const doc = await api("/v3/clusters");
    clusterId = doc.data[0].cluster_id;
  }
  return clusterId;
}

export const enc = encodeURIComponent;
