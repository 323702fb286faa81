// Shopper JWTs come from the shop's own login: HS256 with a shared secret, or RS256/ES256
// signed by keys it publishes as a JWKS. The key set is cached per isolate so a sale does
// not fetch it once per click; an unknown `kid` (key rotation) refetches, at most once a minute.
import { verify, verifyWithJwks } from 'hono/jwt';
import type { HonoJsonWebKey } from 'hono/utils/jwt/jws';
import { decodeHeader } from 'hono/utils/jwt/jwt';
import type { JWTPayload } from 'hono/utils/jwt/types';
import { z } from 'zod';
import type { ShopperAuthConfig } from '../kernel/config';
import { hmacKey } from '../kernel/crypto';
import { AppError } from '../kernel/errors';
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

type KeySet = { keys: HonoJsonWebKey[]; fetchedAt: number };
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

async function keysFor(url: string, kid: string | undefined, now: number): Promise<HonoJsonWebKey[]> {
  const cached = keySets.get(url);
  if (cached) {
    const age = now - cached.fetchedAt;
    const knowsKid = cached.keys.some((k) => k.kid === kid);
    if (age < KEYS_TTL_MS && (knowsKid || age < UNKNOWN_KID_REFETCH_MS)) {
      return cached.keys;
    }
  }
  try {
    const keys = await fetchKeys(url);
    keySets.set(url, { keys, fetchedAt: now });
    return keys;
  } catch (error) {
    if (cached) {
      log.warn('auth.jwks_stale', { url, error });
      return cached.keys;
    }
    log.error('auth.jwks_unavailable', { url, error });
    throw new AppError('UNAVAILABLE', 'the login keys cannot be fetched right now, please retry');
  }
}

/** Verifies a shopper token with the configured method; throws AppError when the keys are unreachable. */
export async function verifyShopperToken(token: string, auth: ShopperAuthConfig, now = Date.now()): Promise<JWTPayload> {
  const verification = { iss: auth.issuer, aud: auth.audience };
  // The header alone picks the method; verify() reads the payload itself.
  const { alg, kid } = decodeHeader(token);
  if (alg === 'HS256' && auth.hs256Secret) {
    return verify(token, await hmacKey(auth.hs256Secret), { alg, ...verification });
  }
  if ((alg === 'RS256' || alg === 'ES256') && auth.jwksUrl) {
    const keys = await keysFor(auth.jwksUrl, kid, now);
    return verifyWithJwks(token, { keys, allowedAlgorithms: ASYMMETRIC, verification });
  }
  throw new Error(`tokens signed with ${alg} are not accepted`);
}

/** Forgets cached key sets (tests). */
export function clearKeySets(): void {
  keySets.clear();
}
