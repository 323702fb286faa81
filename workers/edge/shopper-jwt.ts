// Shopper JWTs come from the shop's own login: HS256 with a shared secret, or RS256/ES256
// signed by keys it publishes as a JWKS. Every token must expire (`exp`) within the configured
// lifetime, and carry `iss` / `aud` when those are configured.
//
// The key set is cached per isolate so a sale does not fetch it once per click. Once it is
// stale it is still served while ONE refresh per isolate runs in the background (waitUntil),
// so a slow or dead login server never holds a shopper's request; no request ever awaits a
// fetch another request started (workerd cancels such a wait). Only an isolate with no keys
// at all, or a token with an unknown `kid` (key rotation, at most once a minute), waits for a
// fetch of its own.
import { verifyWithJwks } from 'hono/jwt';
import type { HonoJsonWebKey } from 'hono/utils/jwt/jws';
import { decodeHeader } from 'hono/utils/jwt/jwt';
import type { JWTPayload } from 'hono/utils/jwt/types';
import { z } from 'zod';
import type { ShopperAuthConfig } from '../kernel/config';
import { hmacKey } from '../kernel/crypto';
import { AppError, unavailable } from '../kernel/errors';
import { signedWithHs256, verifyHs256 } from '../kernel/jwt-hs256';
import { log } from '../kernel/log';

const ASYMMETRIC = ['RS256', 'ES256'] as const;
const KEYS_TTL_MS = 10 * 60_000;
const UNKNOWN_KID_REFETCH_MS = 60_000;
const FETCH_TIMEOUT_MS = 3_000;

const Jwk = z.object({
  kty: z.string(),
  kid: z.string().optional(),
  alg: z.string().optional(),
  use: z.string().optional(),
  n: z.string().optional(),
  e: z.string().optional(),
  crv: z.string().optional(),
  x: z.string().optional(),
  y: z.string().optional(),
});
const JwksBody = z.object({ keys: z.array(z.unknown()) });

/** A refresh not finished after this long is presumed lost (its request was cancelled). */
const REFRESH_STUCK_MS = 2 * FETCH_TIMEOUT_MS;

/**
 * Tokens this isolate verified lately, per auth configuration (a new secret or key set is a new
 * configuration, so nothing verified under the old one is taken for the new). A shopper sends
 * the same token with every request of a sale (challenge, token, purchase, each result poll);
 * the same string with the same signature verifies the same way, so only its expiry and lifetime
 * are checked again. An entry lasts at most VERIFIED_TTL_MS (a key the login withdrew stops
 * counting within a minute) and never past the token's `exp`. Failures are not kept.
 */
const VERIFIED_TTL_MS = 60_000;
const VERIFIED_MAX = 5_000;
type Verified = { payload: JWTPayload; until: number };
let verifiedByConfig = new WeakMap<ShopperAuthConfig, Map<string, Verified>>();

function verifiedOf(auth: ShopperAuthConfig): Map<string, Verified> {
  let verified = verifiedByConfig.get(auth);
  if (!verified) {
    verified = new Map();
    verifiedByConfig.set(auth, verified);
  }
  return verified;
}

function rememberVerified(verified: Map<string, Verified>, token: string, payload: JWTPayload, now: number): void {
  const exp = typeof payload.exp === 'number' ? payload.exp * 1000 : now;
  if (verified.size >= VERIFIED_MAX) {
    // The oldest entry goes (a Map keeps insertion order).
    const oldest = verified.keys().next().value;
    if (oldest !== undefined) {
      verified.delete(oldest);
    }
  }
  verified.set(token, { payload, until: Math.min(now + VERIFIED_TTL_MS, exp) });
}

/** Schedules work that must finish even if the request that started it ends (ctx.waitUntil). */
export type WaitUntil = (promise: Promise<unknown>) => void;

type KeySet = {
  keys: HonoJsonWebKey[];
  fetchedAt: number;
  /** When the last fetch (successful or not) started: unknown kids refetch once a minute after it. */
  triedAt: number;
  /** When the refresh now running started, or 0. */
  refreshingSince: number;
};
const keySets = new Map<string, KeySet>();

async function fetchKeys(url: string): Promise<HonoJsonWebKey[]> {
  // Each request fetches on its own (never awaits another request's fetch: workerd cancels
  // that); the edge cache keeps a burst of cold isolates from hammering the login server.
  const res = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), cf: { cacheTtl: 300, cacheEverything: true } });
  if (!res.ok) {
    throw new Error(`the key set answered HTTP ${res.status}`);
  }
  const body = JwksBody.safeParse(await res.json());
  if (!body.success) {
    throw new Error('the answer is not a JSON Web Key Set');
  }
  // Keys of other kinds (e.g. encryption keys) are skipped rather than failing the set.
  return body.data.keys.flatMap((k) => {
    const key = Jwk.safeParse(k);
    return key.success && key.data.use !== 'enc' ? [key.data] : [];
  });
}

/** Fetches the set and stores it; the caller awaits only this fetch, its own. */
async function fetchInto(url: string, now: number): Promise<HonoJsonWebKey[]> {
  const entry = keySets.get(url);
  if (entry) {
    entry.triedAt = now;
  }
  const keys = await fetchKeys(url);
  keySets.set(url, { keys, fetchedAt: now, triedAt: now, refreshingSince: 0 });
  return keys;
}

/** Starts a refresh in the background unless one is running; the stale set keeps serving meanwhile. */
function refreshInBackground(url: string, cached: KeySet, now: number, waitUntil: WaitUntil | undefined): void {
  if (cached.refreshingSince > 0 && now - cached.refreshingSince < REFRESH_STUCK_MS) {
    return;
  }
  cached.refreshingSince = now;
  const refresh = fetchInto(url, now).catch((error: unknown) => {
    cached.refreshingSince = 0;
    log.warn('auth.jwks_stale', { url, error });
  });
  if (waitUntil) {
    waitUntil(refresh);
  } else {
    // No execution context (a direct call): the refresh runs on its own; failures are logged above.
    void refresh;
  }
}

async function keysFor(url: string, kid: string | undefined, now: number, waitUntil: WaitUntil | undefined): Promise<HonoJsonWebKey[]> {
  const cached = keySets.get(url);
  if (!cached) {
    try {
      return await fetchInto(url, now);
    } catch (error) {
      log.error('auth.jwks_unavailable', { url, error });
      throw unavailable('the login keys cannot be fetched right now, please retry');
    }
  }
  const knowsKid = cached.keys.some((k) => k.kid === kid);
  const refreshing = cached.refreshingSince > 0 && now - cached.refreshingSince < REFRESH_STUCK_MS;
  if (!knowsKid && !refreshing && now - cached.triedAt >= UNKNOWN_KID_REFETCH_MS) {
    // Perhaps the login rotated its keys: this request looks for itself, once a minute.
    try {
      return await fetchInto(url, now);
    } catch (error) {
      log.warn('auth.jwks_stale', { url, error });
      return cached.keys;
    }
  }
  if (now - cached.fetchedAt >= KEYS_TTL_MS) {
    refreshInBackground(url, cached, now, waitUntil);
  }
  return cached.keys;
}

/**
 * Every token must expire, and within `maxSeconds` of when it was issued (or of now, for a token
 * without `iat`): a token that never expires is a password that cannot be changed.
 */
function checkLifetime(payload: JWTPayload, maxSeconds: number, now: number): void {
  const exp = payload.exp;
  if (typeof exp !== 'number' || !Number.isFinite(exp)) {
    throw new AppError('UNAUTHENTICATED', 'the token has no expiry (exp): sign in again');
  }
  const nowSeconds = Math.floor(now / 1000);
  const issuedAt = typeof payload.iat === 'number' && Number.isFinite(payload.iat) ? payload.iat : nowSeconds;
  if (exp - issuedAt > maxSeconds || exp - nowSeconds > maxSeconds) {
    throw new AppError('UNAUTHENTICATED', `the token lives longer than the ${maxSeconds} s this shop accepts: sign in again`);
  }
}

/**
 * Verifies a shopper token with the configured method and its lifetime; throws AppError
 * (UNAUTHENTICATED with the reason, or UNAVAILABLE when no keys can be had). `waitUntil` keeps
 * a background refresh of the key set alive after the request has its answer.
 */
export async function verifyShopperToken(
  token: string,
  auth: ShopperAuthConfig,
  now = Date.now(),
  waitUntil?: WaitUntil,
): Promise<JWTPayload> {
  const verified = verifiedOf(auth);
  const known = verified.get(token);
  if (known && now < known.until) {
    checkLifetime(known.payload, auth.maxLifetimeSeconds, now);
    return known.payload;
  }
  const verification = { iss: auth.issuer, aud: auth.audience };
  // The header alone picks the method; each verification reads the payload itself.
  let payload: JWTPayload;
  if (auth.hs256Secret && signedWithHs256(token)) {
    payload = (await verifyHs256(token, await hmacKey(auth.hs256Secret), verification, now)) as JWTPayload;
  } else {
    const { alg, kid } = decodeHeader(token);
    if (!((alg === 'RS256' || alg === 'ES256') && auth.jwksUrl)) {
      throw new Error(`tokens signed with ${alg} are not accepted`);
    }
    const keys = await keysFor(auth.jwksUrl, kid, now, waitUntil);
    payload = await verifyWithJwks(token, { keys, allowedAlgorithms: ASYMMETRIC, verification });
  }
  checkLifetime(payload, auth.maxLifetimeSeconds, now);
  rememberVerified(verified, token, payload, now);
  return payload;
}

/** Forgets cached key sets and verified tokens (tests). */
export function clearKeySets(): void {
  keySets.clear();
  verifiedByConfig = new WeakMap();
}
