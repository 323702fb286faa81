import type { GoodsRow } from '../../db/goods';
import type { FailReason, ReserveOutcome } from '../kernel/contract';
import { sha256B64, timeOrderedId } from '../kernel/crypto';
import { AppError, type ErrorCode } from '../kernel/errors';
import { keyTimeMs, timePrefix } from '../kernel/time-order';
import { type PurchaseToken, verifyPurchase } from './signed';
import { keyedMayPassSoldOut, keyedRefusedNow, knownSoldOut } from './sold-out';

// The purchase's decisions at the edge, without Hono: what the isolate's copies can answer,
// the token check, the purchase id, and the contract's answer for the object's refusals.
// workers/http/routes/purchase.ts runs them in order.

/** One-time purchase tokens live 60 s (seed: token and path valid 60 s). */
export const PURCHASE_TOKEN_TTL_MS = 60_000;
/**
 * How long after its token expired a keyed retry may still reach the object, to be replayed
 * the answer its client missed. Minutes, not more: beyond it the edge answers TOKEN_INVALID.
 */
export const KEYED_GRACE_MS = 3 * 60_000;

/**
 * The answers the isolate's copies give, each made once and returned again and again: they hold
 * nothing of their request, and the flood after a sell-out is made of them. Returned, not
 * thrown: a new Error costs workerd about 0.4 µs and a throw 1-3 µs more, several times that
 * with the inspector open (as under `wrangler dev` and the bench).
 */
const COPY_ANSWERS = {
  ENDED: new AppError('ENDED'),
  NOT_STARTED: new AppError('NOT_STARTED'),
  PAUSED: new AppError('PAUSED'),
  SOLD_OUT: new AppError('SOLD_OUT'),
};

/**
 * What the edge can answer for a purchase without the goods' object, from isolate-local copies:
 * ended, not started, paused (the goods list, a few seconds old), sold out (trusted a few
 * seconds); undefined to go on. For requests without an Idempotency-Key; keyed ones have
 * keyedRefusalFromCopies.
 */
export function refusalFromCopies(goods: GoodsRow, now: number): AppError | undefined {
  if (now >= goods.endAt.getTime()) {
    return COPY_ANSWERS.ENDED;
  }
  if (now < goods.startAt.getTime()) {
    return COPY_ANSWERS.NOT_STARTED;
  }
  if (goods.status === 1) {
    return COPY_ANSWERS.PAUSED;
  }
  return knownSoldOut(goods.id, now) ? COPY_ANSWERS.SOLD_OUT : undefined;
}

/**
 * The same answers for a request with an Idempotency-Key, which may be owed the answer the
 * object gave its key before. It passes only where that can be so: never before the start
 * (nothing was accepted then); after the end or while paused only while its token is within
 * its lifetime and the grace; after a sell-out only if the object answered this key (see
 * keyedMayPassSoldOut). `tokenExpiresAt` is the token's claim, not yet verified: a forged one
 * can only send the request on to the checks that verify it.
 */
export function keyedRefusalFromCopies(
  goods: GoodsRow,
  keyed: { requestId: string; tokenExpiresAt: number | undefined },
  now: number,
): AppError | undefined {
  const inGrace = keyed.tokenExpiresAt !== undefined && now < keyed.tokenExpiresAt + KEYED_GRACE_MS;
  if (!inGrace && now >= goods.endAt.getTime()) {
    return COPY_ANSWERS.ENDED;
  }
  if (now < goods.startAt.getTime()) {
    return COPY_ANSWERS.NOT_STARTED;
  }
  if (goods.status === 1 && !inGrace) {
    return COPY_ANSWERS.PAUSED;
  }
  return keyedMayPassSoldOut(goods.id, keyed.requestId, now) ? undefined : COPY_ANSWERS.SOLD_OUT;
}

/**
 * A keyed purchase's SOLD_OUT before its body is read: only while a fresh sell-out is known and
 * the object has not answered its key (keyedRefusedNow; the re-check turn is left to
 * keyedRefusalFromCopies). ENDED and PAUSED wait for the body: a keyed retry within its token's
 * grace may be owed an answer, and the token says when it expires.
 */
export function keyedRefusalBeforeBody(goods: GoodsRow, requestId: string, now: number): AppError | undefined {
  return keyedRefusedNow(goods.id, requestId, now) ? COPY_ANSWERS.SOLD_OUT : undefined;
}

/** 410 ENDED once the goods' sale window has closed (every sale route checks this first). */
export function refuseIfEnded(goods: GoodsRow, now: number): void {
  if (now >= goods.endAt.getTime()) {
    throw COPY_ANSWERS.ENDED;
  }
}

/**
 * The purchase token and hidden path, or 403 TOKEN_INVALID. With an Idempotency-Key a token
 * expired less than KEYED_GRACE_MS ago may still replay its first answer (the object decides);
 * without one, or later, it is refused here.
 */
export async function checkPurchaseToken(
  secret: string,
  input: { token: string; path: string; userId: string; goodsId: number; keyed: boolean },
  now: number,
): Promise<PurchaseToken> {
  const verified = await verifyPurchase(
    secret,
    input.token,
    input.path,
    input.userId,
    input.goodsId,
    now - (input.keyed ? KEYED_GRACE_MS : 0),
  );
  if (!verified || (!input.keyed && verified.expiresAt <= now)) {
    throw new AppError('TOKEN_INVALID');
  }
  return verified;
}

/** The purchase's request id: derived from the Idempotency-Key when there is one, so a retry finds its answer. */
export async function purchaseIdOf(goodsId: number, userId: string, key: string | undefined): Promise<string> {
  if (!key) {
    return `${goodsId}.${timeOrderedId()}`;
  }
  const hash = await sha256B64(`${userId}|${goodsId}|${key}`, 22);
  // A key that carries its time (the shopper page's) puts it first, as an unkeyed id does; the
  // 78 bits of hash after it keep ids apart. Any other key's id is its whole hash, as before.
  const at = keyTimeMs(key);
  return `${goodsId}.${at === undefined ? hash : `${timePrefix(at)}${hash.slice(0, 13)}`}`;
}

const REASON_CODE: Record<FailReason, ErrorCode> = {
  SOLD_OUT: 'SOLD_OUT',
  ALREADY_PURCHASED: 'ALREADY_PURCHASED',
  NOT_STARTED: 'NOT_STARTED',
  ENDED: 'ENDED',
  PAUSED: 'PAUSED',
  TOKEN_INVALID: 'TOKEN_INVALID',
  NOT_FOUND: 'NOT_FOUND',
  BUSY: 'BUSY',
  CANCELLED: 'CONFLICT',
  CLOSED_TIMEOUT: 'CONFLICT',
  ORDER_FAILED: 'CONFLICT',
  LIMIT_REACHED: 'LIMIT_REACHED',
  NOT_ELIGIBLE: 'NOT_ELIGIBLE',
};

/**
 * Whether the object keeps this answer for the key and replays it to a retry (so the retry must
 * reach it). SOLD_OUT is what the fast path says anyway; the others are not remembered.
 */
export function replayedToRetries(outcome: ReserveOutcome): boolean {
  return outcome.ok || !['SOLD_OUT', 'TOKEN_INVALID', 'BUSY', 'NOT_FOUND'].includes(outcome.reason);
}

/** The contract's answer to a reservation the object refused; a SOLD_OUT for more units than are left says how many are. */
export function refusal(reason: FailReason, remaining?: number): AppError {
  if (reason === 'SOLD_OUT' && remaining) {
    return new AppError('SOLD_OUT', `only ${remaining} left: ask for ${remaining} or fewer`, {}, { remaining });
  }
  if (reason === 'BUSY') {
    return new AppError('BUSY', undefined, { 'retry-after': '1' });
  }
  return new AppError(REASON_CODE[reason]);
}
