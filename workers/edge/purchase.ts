import type { GoodsRow } from '../../db/goods';
import type { FailReason } from '../kernel/contract';
import { randomId, sha256B64 } from '../kernel/crypto';
import { AppError, type ErrorCode } from '../kernel/errors';
import { type PurchaseToken, verifyPurchase } from './signed';
import { knownSoldOut } from './sold-out';

// The purchase's decisions at the edge, without Hono: what the isolate's copies can answer,
// the token check, the purchase id, and the contract's answer for the object's refusals.
// workers/http/routes/purchase.ts runs them in order.

/** One-time purchase tokens live 60 s (seed: token and path valid 60 s). */
export const PURCHASE_TOKEN_TTL_MS = 60_000;

/**
 * What the edge can answer for a purchase without the goods' object, from isolate-local copies:
 * ended, not started, paused (the goods list, a few seconds old), sold out (trusted a few
 * seconds). Only for requests without an Idempotency-Key: a keyed retry may be owed the answer
 * the object gave it earlier, so it always goes through.
 */
export function refuseFromCopies(goods: GoodsRow, now: number): void {
  refuseIfEnded(goods, now);
  if (now < goods.startAt.getTime()) {
    throw new AppError('NOT_STARTED');
  }
  if (goods.status === 1) {
    throw new AppError('PAUSED');
  }
  if (knownSoldOut(goods.id, now)) {
    throw new AppError('SOLD_OUT');
  }
}

/** 410 ENDED once the goods' sale window has closed (every sale route checks this first). */
export function refuseIfEnded(goods: GoodsRow, now: number): void {
  if (now >= goods.endAt.getTime()) {
    throw new AppError('ENDED');
  }
}

/**
 * The purchase token and hidden path, or 403 TOKEN_INVALID. With an Idempotency-Key an expired
 * token may still replay its first answer (the object decides); without one it is refused here.
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
    now - (input.keyed ? PURCHASE_TOKEN_TTL_MS * 60 : 0),
  );
  if (!verified || (!input.keyed && verified.expiresAt <= now)) {
    throw new AppError('TOKEN_INVALID');
  }
  return verified;
}

/** The purchase's request id: derived from the Idempotency-Key when there is one, so a retry finds its answer. */
export async function purchaseIdOf(goodsId: number, userId: string, key: string | undefined): Promise<string> {
  return `${goodsId}.${key ? await sha256B64(`${userId}|${goodsId}|${key}`, 22) : randomId()}`;
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
};

/** The contract's answer to a reservation the object refused. */
export function refusal(reason: FailReason): AppError {
  return new AppError(REASON_CODE[reason]);
}
