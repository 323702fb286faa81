import { z } from 'zod';
import { fromBase64Url, hmacB64, randomId, safeEqual, toBase64Url } from '../kernel/crypto';

// Stateless signed blobs: `base64url(json).base64url(hmac)`. Signatures are domain-separated
// by a purpose prefix so a challenge can never be replayed as a purchase token. Single use
// is enforced where they are spent (the guard object for challenges, the goods' object for
// purchase tokens), not here.

const decoder = new TextDecoder();
const encoder = new TextEncoder();

async function seal(secret: string, purpose: string, payload: object): Promise<string> {
  const body = toBase64Url(encoder.encode(JSON.stringify(payload)));
  return `${body}.${await hmacB64(secret, `${purpose}|${body}`)}`;
}

async function open<T>(secret: string, purpose: string, blob: string, schema: z.ZodType<T>): Promise<T | undefined> {
  const dot = blob.indexOf('.');
  if (dot <= 0 || blob.length > 1024) {
    return undefined;
  }
  const body = blob.slice(0, dot);
  const sig = blob.slice(dot + 1);
  if (!safeEqual(sig, await hmacB64(secret, `${purpose}|${body}`))) {
    return undefined;
  }
  const bytes = fromBase64Url(body);
  if (!bytes) {
    return undefined;
  }
  try {
    const parsed = schema.safeParse(JSON.parse(decoder.decode(bytes)));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

const PurchaseTokenPayload = z.object({ u: z.string(), g: z.number(), e: z.number(), j: z.string() });
export type PurchaseToken = { userId: string; goodsId: number; expiresAt: number; tokenId: string };

/** Issues a one-time purchase token bound to user and goods, and its hidden path. */
export async function issuePurchaseToken(secret: string, userId: string, goodsId: number, ttlMs: number, now = Date.now()) {
  const expiresAt = now + ttlMs;
  const tokenId = randomId();
  const token = await seal(secret, 'purchase', { u: userId, g: goodsId, e: expiresAt, j: tokenId });
  return { token, path: await purchasePath(secret, userId, goodsId, expiresAt), expiresAt, tokenId };
}

/** The hidden path: only this user, this goods, this token window produce it. */
export function purchasePath(secret: string, userId: string, goodsId: number, expiresAt: number): Promise<string> {
  return hmacB64(secret, `path|${userId}|${goodsId}|${expiresAt}`, 32);
}

/**
 * The expiry a purchase token claims, read WITHOUT checking its signature: only for decisions
 * that send a request on to verifyPurchase, never for letting one through.
 */
export function claimedPurchaseExpiry(token: string): number | undefined {
  const dot = token.indexOf('.');
  const bytes = dot > 0 && token.length <= 1024 ? fromBase64Url(token.slice(0, dot)) : undefined;
  if (!bytes) {
    return undefined;
  }
  try {
    const parsed = PurchaseTokenPayload.safeParse(JSON.parse(decoder.decode(bytes)));
    return parsed.success ? parsed.data.e : undefined;
  } catch {
    return undefined;
  }
}

/** Verifies a purchase token and its path for a user and goods; undefined when anything is off. */
export async function verifyPurchase(
  secret: string,
  token: string,
  path: string,
  userId: string,
  goodsId: number,
  now = Date.now(),
): Promise<PurchaseToken | undefined> {
  const p = await open(secret, 'purchase', token, PurchaseTokenPayload);
  if (!p || p.u !== userId || p.g !== goodsId || p.e <= now) {
    return undefined;
  }
  if (!safeEqual(path, await purchasePath(secret, userId, goodsId, p.e))) {
    return undefined;
  }
  return { userId: p.u, goodsId: p.g, expiresAt: p.e, tokenId: p.j };
}

const ChallengePayload = z.object({
  u: z.string(),
  g: z.number(),
  e: z.number(),
  n: z.string(),
  k: z.enum(['arithmetic', 'pow']),
  h: z.string(),
  d: z.number().optional(),
});
export type Challenge = z.infer<typeof ChallengePayload>;

/** Seals a challenge; `answerHash` is an HMAC of the expected answer, never the answer. */
export function sealChallenge(secret: string, c: Challenge): Promise<string> {
  return seal(secret, 'challenge', c);
}

export function openChallenge(secret: string, id: string): Promise<Challenge | undefined> {
  return open(secret, 'challenge', id, ChallengePayload);
}

export function answerHash(secret: string, nonce: string, answer: string): Promise<string> {
  return hmacB64(secret, `answer|${nonce}|${answer.trim()}`, 22);
}
