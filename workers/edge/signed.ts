import { z } from 'zod';
import { hmacB64, safeEqual, timeOrderedId } from '../kernel/crypto';
import { PURCHASE_PATH } from '../kernel/http-bodies';
import { openBlob, peekBlob, sealBlob } from '../kernel/sealed';

// Stateless signed blobs: `base64url(json).base64url(hmac)`. Signatures are domain-separated
// by a purpose prefix so a challenge can never be replayed as a purchase token. Single use
// is enforced where they are spent (the guard object for challenges, the goods' object for
// purchase tokens), not here.

const seal = sealBlob;
/** Longest blob read (a challenge with its proof-of-work fields is the largest). */
const MAX_BLOB = 1024;
const open = <T>(secret: string, purpose: string, blob: string, schema: z.ZodType<T>) => openBlob(secret, purpose, blob, schema, MAX_BLOB);

/** `a`: issued to a shopper the waiting room let in (absent otherwise, and in tokens of builds before it). */
type PurchaseTokenClaims = { u: string; g: number; e: number; j: string; a?: 1 };
// A guard rather than z.object: it is read on every purchase, and workerd's zod checks objects
// field by field in its interpreter (http/middleware/validate.ts).
const PurchaseTokenPayload = z.custom<PurchaseTokenClaims>((value) => {
  const p = value as Partial<Record<keyof PurchaseTokenClaims, unknown>> | null;
  return (
    typeof p === 'object' &&
    p !== null &&
    typeof p.u === 'string' &&
    typeof p.g === 'number' &&
    typeof p.e === 'number' &&
    typeof p.j === 'string'
  );
});
export type PurchaseToken = { userId: string; goodsId: number; expiresAt: number; tokenId: string; admitted: boolean };

/**
 * Issues a one-time purchase token bound to user and goods, and its hidden path; `admitted` when
 * the shopper showed the waiting room's pass for it.
 */
export async function issuePurchaseToken(
  secret: string,
  userId: string,
  goodsId: number,
  ttlMs: number,
  now = Date.now(),
  admitted = false,
) {
  const expiresAt = now + ttlMs;
  // Time-ordered: the goods' object keeps every spent token id, indexed (kernel/crypto.ts).
  const tokenId = timeOrderedId(now);
  const claims: PurchaseTokenClaims = { u: userId, g: goodsId, e: expiresAt, j: tokenId };
  if (admitted) {
    claims.a = 1;
  }
  const token = await seal(secret, 'purchase', claims);
  return { token, path: await purchasePath(secret, userId, goodsId, expiresAt), expiresAt, tokenId };
}

/**
 * The hidden path: only this user, this goods, this token window produce it. It starts with the
 * goods id (`42.` then 32 characters of HMAC), so the edge can answer a sold-out or ended goods
 * from the path alone, before it reads the body; the HMAC covers the goods id too.
 */
export async function purchasePath(secret: string, userId: string, goodsId: number, expiresAt: number): Promise<string> {
  return `${goodsId}.${await pathMac(secret, userId, goodsId, expiresAt)}`;
}

function pathMac(secret: string, userId: string, goodsId: number, expiresAt: number): Promise<string> {
  return hmacB64(secret, `path|${userId}|${goodsId}|${expiresAt}`, 32);
}

/** The goods id a hidden path names, unverified: only for answers the goods' own state gives anyone. */
export function goodsOfPurchasePath(path: string): number | undefined {
  const goodsId = Number(PURCHASE_PATH.exec(path)?.[1]);
  return Number.isSafeInteger(goodsId) ? goodsId : undefined;
}

/**
 * The expiry a purchase token claims, read WITHOUT checking its signature: only for decisions
 * that send a request on to verifyPurchase, never for letting one through.
 */
export function claimedPurchaseExpiry(token: string): number | undefined {
  return peekBlob(token, PurchaseTokenPayload, MAX_BLOB)?.e;
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
  const shape = PURCHASE_PATH.exec(path);
  const named = shape?.[1];
  if (!shape?.[2] || (named !== undefined && named !== String(goodsId))) {
    return undefined;
  }
  if (!safeEqual(shape[2], await pathMac(secret, userId, goodsId, p.e))) {
    return undefined;
  }
  return { userId: p.u, goodsId: p.g, expiresAt: p.e, tokenId: p.j, admitted: p.a === 1 };
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
