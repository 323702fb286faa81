import * as z from 'zod/mini';

// The shopper's JWT. It lives in sessionStorage (gone when the tab closes, never sent
// automatically like a cookie). Two ways in:
//  - locally, the sign-in form asks POST /api/dev/token (DEV_MODE only);
//  - in production the shop's login redirects to this page with `#jwt=<token>` in the
//    fragment (fragments never reach servers, logs or Referer headers); the page stores it
//    and removes it from the address bar at once.
//
// A hand-over link is a way to sign someone in as someone else (login CSRF: a link carrying
// the attacker's token, and the victim buys for the attacker). So a hand-over is taken
// silently only when it answers a sign-in this page started: the page sends the shopper to the
// shop's login with `state=<nonce>` it keeps, and the login returns `#jwt=...&state=<nonce>`.
// A hand-over without that state is taken only after the shopper confirms (or when it is the
// shopper already signed in, with a fresh token); one with a state that is not ours is dropped.

const STORAGE_KEY = 'seckill:jwt';
const NONCE_KEY = 'seckill:handoff-state';
const HANDOFF_PARAM = 'jwt';
const STATE_PARAM = 'state';

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

/** What to do with a hand-over: take it, ask the shopper first, or drop it. */
export type HandoffPlan =
  | { kind: 'none' }
  | { kind: 'accept'; session: Session }
  /** Not bound to a sign-in this page started: ask before signing in (or switching from `current`). */
  | { kind: 'confirm'; session: Session; current: Session | undefined }
  | { kind: 'reject'; why: 'unreadable' | 'foreign-state' };

/** Decides a hand-over. Pure: the page's storage and address bar are the caller's. */
export function planHandoff(input: {
  token: string | null;
  state: string | null;
  /** The nonce this page sent to the login, if it sent the shopper there. */
  expectedState: string | null;
  current: Session | undefined;
  nowMs?: number;
}): HandoffPlan {
  if (!input.token) {
    return { kind: 'none' };
  }
  const session = readSession(input.token, input.nowMs);
  if (!session) {
    return { kind: 'reject', why: 'unreadable' };
  }
  if (input.state !== null) {
    return input.expectedState !== null && input.state === input.expectedState
      ? { kind: 'accept', session }
      : { kind: 'reject', why: 'foreign-state' };
  }
  if (input.current?.userId === session.userId) {
    // The same shopper with a fresh token: nobody is switched.
    return { kind: 'accept', session };
  }
  return { kind: 'confirm', session, current: input.current };
}

function randomState(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The shop's login URL for a sign-in this page starts: `state` is a fresh nonce the page
 * keeps (the login hands it back with the token) and `return_to` this page.
 */
export function loginUrl(base: string, returnTo: string): string {
  const state = randomState();
  store()?.setItem(NONCE_KEY, state);
  const url = new URL(base, returnTo);
  url.searchParams.set(STATE_PARAM, state);
  url.searchParams.set('return_to', returnTo);
  return url.toString();
}

/**
 * Takes a `#jwt=...` handed over by the shop's login, as planHandoff decides (`confirm` asks
 * the shopper when it must), and cleans it from the address bar either way. The nonce is
 * single-use. Returns what was done.
 */
export function takeHandoff(confirm: (plan: Extract<HandoffPlan, { kind: 'confirm' }>) => boolean): HandoffPlan['kind'] {
  const hash = new URLSearchParams(location.hash.slice(1));
  const token = hash.get(HANDOFF_PARAM);
  if (!token) {
    return 'none';
  }
  const state = hash.get(STATE_PARAM);
  hash.delete(HANDOFF_PARAM);
  hash.delete(STATE_PARAM);
  const rest = hash.toString();
  history.replaceState(history.state, '', `${location.pathname}${location.search}${rest ? `#${rest}` : ''}`);
  const expectedState = store()?.getItem(NONCE_KEY) ?? null;
  store()?.removeItem(NONCE_KEY);
  const plan = planHandoff({ token, state, expectedState, current: currentSession() });
  if (plan.kind === 'accept' || (plan.kind === 'confirm' && confirm(plan))) {
    store()?.setItem(STORAGE_KEY, plan.session.token);
    return 'accept';
  }
  return plan.kind === 'confirm' ? 'reject' : plan.kind;
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
