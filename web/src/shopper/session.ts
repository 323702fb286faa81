import * as z from 'zod/mini';

// The shopper's JWT. It lives in sessionStorage (gone when the tab closes, never sent
// automatically like a cookie). Two ways in:
//  - locally, the sign-in form asks POST /api/dev/token (DEV_MODE only);
//  - in production the shop's login redirects to this page with `#jwt=<token>` in the
//    fragment (fragments never reach servers, logs or Referer headers); the page stores it
//    and removes it from the address bar at once.

const STORAGE_KEY = 'seckill:jwt';
const HANDOFF_PARAM = 'jwt';

const Claims = z.object({ sub: z.string(), exp: z.optional(z.number()) });
export type Session = { token: string; userId: string; expiresAt: number | undefined };

function base64UrlDecode(part: string): string {
  const b64 = part
    .replace(/-/g, '+')
    .replace(/_/g, '/')
    .padEnd(Math.ceil(part.length / 4) * 4, '=');
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

/**
 * Reads the user id and expiry from a JWT for display. The signature is the server's
 * business: a forged token only fools this page, never the API.
 */
export function readSession(token: string, nowMs = Date.now()): Session | undefined {
  const payload = token.split('.')[1];
  if (!payload) {
    return undefined;
  }
  let json: unknown;
  try {
    json = JSON.parse(base64UrlDecode(payload));
  } catch {
    return undefined;
  }
  const claims = Claims.safeParse(json);
  if (!claims.success) {
    return undefined;
  }
  const expiresAt = claims.data.exp === undefined ? undefined : claims.data.exp * 1000;
  if (expiresAt !== undefined && expiresAt <= nowMs) {
    return undefined;
  }
  return { token, userId: claims.data.sub, expiresAt };
}

function store(): Storage | undefined {
  try {
    return sessionStorage;
  } catch {
    return undefined;
  }
}

/** Takes a `#jwt=...` handed over by the shop's login and cleans it from the address bar. */
export function takeHandoff(): void {
  const hash = new URLSearchParams(location.hash.slice(1));
  const token = hash.get(HANDOFF_PARAM);
  if (!token) {
    return;
  }
  hash.delete(HANDOFF_PARAM);
  const rest = hash.toString();
  history.replaceState(history.state, '', `${location.pathname}${location.search}${rest ? `#${rest}` : ''}`);
  if (readSession(token)) {
    store()?.setItem(STORAGE_KEY, token);
  }
}

/** The current session, if a valid unexpired token is stored. */
export function currentSession(): Session | undefined {
  const token = store()?.getItem(STORAGE_KEY);
  if (!token) {
    return undefined;
  }
  const session = readSession(token);
  if (!session) {
    store()?.removeItem(STORAGE_KEY);
  }
  return session;
}

export function saveSession(token: string): Session | undefined {
  const session = readSession(token);
  if (session) {
    store()?.setItem(STORAGE_KEY, token);
  }
  return session;
}

export function clearSession(): void {
  store()?.removeItem(STORAGE_KEY);
}
