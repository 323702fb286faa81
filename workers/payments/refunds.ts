import { waitUntil } from 'cloudflare:workers';
import type { Db } from '../../db/client';
import { pendingRefunds, type RefundRow, settleRefund } from '../../db/payments';
import type { Config } from '../kernel/config';
import { log } from '../kernel/log';
import { providerNamed } from './index';
import type { PaymentProvider, RefundAnswer } from './provider';

/** A refund the provider has not confirmed is tried again after this long (by the cron). */
export const REFUND_RETRY_AFTER_MS = 60_000;

/**
 * Asks the provider to return a refund's money and records its answer: SUCCEEDED, FAILED
 * (the provider refused for good: an operator must look), or still PENDING (retried later).
 */
export async function executeRefund(db: Db, provider: PaymentProvider | undefined, refund: RefundRow): Promise<string> {
  if (!provider) {
    log.error('refund.no_provider', { refundId: refund.id, paymentId: refund.paymentId });
    return 'PENDING';
  }
  let answer: RefundAnswer;
  try {
    answer = await provider.refund({
      refundId: refund.id,
      paymentId: refund.paymentId,
      amountCents: refund.amountCents,
      reason: refund.reason,
    });
  } catch (error) {
    answer = { ok: false, retryable: true, error: error instanceof Error ? error.message : String(error) };
  }
  if (answer.ok) {
    await settleRefund(db, refund.id, 'SUCCEEDED');
    log.info('refund.succeeded', { refundId: refund.id, orderId: refund.orderId, amountCents: refund.amountCents });
    return 'SUCCEEDED';
  }
  if (!answer.retryable) {
    await settleRefund(db, refund.id, 'FAILED');
    log.error('refund.failed', { refundId: refund.id, orderId: refund.orderId, error: answer.error });
    return 'FAILED';
  }
  log.warn('refund.retry_later', { refundId: refund.id, error: answer.error });
  return 'PENDING';
}

/** The cron's pass over refunds still waiting for their provider; returns how many settled. */
export async function retryPendingRefunds(config: Config, db: Db, now: number): Promise<number> {
  const rows = await pendingRefunds(db, now - REFUND_RETRY_AFTER_MS);
  let settled = 0;
  for (const row of rows) {
    const status = await executeRefund(db, providerNamed({ config, waitUntil }, row.provider), row.refund);
    if (status !== 'PENDING') {
      settled++;
    }
  }
  return settled;
}
