// The sandbox payment provider for local runs and tests: it takes no money and reports each
// payment's result the way a real provider does, as a signed webhook to this Worker's
// callback route. Staging and production bundles do not contain this module.
import { exports as workerExports } from 'cloudflare:workers';
import { hmacHex, randomId } from '../kernel/crypto';
import type { PaymentCallbackBody } from '../kernel/http-bodies';
import { log } from '../kernel/log';
import type { PaymentIntent, PaymentProvider, ProviderContext } from './provider';

export const SANDBOX = 'sandbox';

/** Any host: the request never leaves the Worker (a loopback to its own fetch handler). */
const CALLBACK_URL = 'https://payments-sandbox.internal/api/payments/callback';
const DELIVERY_ATTEMPTS = 3;

export type SandboxOutcome = 'succeed' | 'fail';

/** Where a shopper finishes (or fails) a held sandbox payment. */
export function sandboxCompletePath(paymentId: string): string {
  return `/api/payments/sandbox/${paymentId}/complete`;
}

/** The provider's event for a payment that ended with `outcome`; each event has its own id. */
export function sandboxEvent(
  payment: Pick<PaymentIntent, 'paymentId' | 'orderId' | 'amountCents'>,
  outcome: SandboxOutcome,
): PaymentCallbackBody {
  return {
    eventId: `evt_${randomId()}`,
    paymentId: payment.paymentId,
    orderId: payment.orderId,
    status: outcome === 'succeed' ? 'SUCCEEDED' : 'FAILED',
    amountCents: payment.amountCents,
  };
}

type Loopback = { fetch(request: Request): Promise<Response> };

function isLoopback(value: unknown): value is Loopback {
  // Loopback bindings are RPC stubs, which are callable proxies (typeof 'function').
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { fetch?: unknown }).fetch === 'function'
  );
}

/** This Worker's own fetch handler (ctx.exports): a Worker cannot always fetch its own hostname. */
function loopback(): Loopback {
  const self: unknown = (workerExports as Record<string, unknown>).default;
  if (!isLoopback(self)) {
    throw new Error('the Worker has no loopback export (needs the enable_ctx_exports compatibility flag)');
  }
  return self;
}

/**
 * Signs `event` with the webhook secret and posts it to the callback route, retrying a 5xx or
 * a thrown delivery like a provider would. Returns the last answer.
 */
export async function deliverWebhook(secret: string, event: PaymentCallbackBody): Promise<Response> {
  const body = JSON.stringify(event);
  const signature = await hmacHex(secret, body);
  for (let attempt = 1; ; attempt++) {
    try {
      const res = await loopback().fetch(
        new Request(CALLBACK_URL, { method: 'POST', headers: { 'content-type': 'application/json', 'x-signature': signature }, body }),
      );
      if (res.status < 500 || attempt >= DELIVERY_ATTEMPTS) {
        return res;
      }
      await res.body?.cancel();
    } catch (error) {
      if (attempt >= DELIVERY_ATTEMPTS) {
        throw error;
      }
    }
    await scheduler.wait(200 * attempt);
  }
}

/**
 * `outcome` (from the pay request) decides the result: `succeed` (default) or `fail` are
 * reported at once, after the pay answer; `hold` waits for the shopper to finish at
 * sandboxCompletePath, which is how a payment arrives late.
 */
export function createSandboxProvider(ctx: ProviderContext): PaymentProvider {
  return {
    name: SANDBOX,
    async start(intent, options) {
      const outcome = options.outcome ?? 'succeed';
      if (outcome === 'hold') {
        return { ok: true, status: 'PENDING', nextAction: { kind: 'redirect', url: sandboxCompletePath(intent.paymentId) } };
      }
      const event = sandboxEvent(intent, outcome);
      ctx.waitUntil(
        deliverWebhook(ctx.config.paymentWebhookSecret, event)
          .then(async (res) => {
            if (!res.ok) {
              log.warn('sandbox.webhook_refused', { eventId: event.eventId, status: res.status, body: await res.text() });
            }
          })
          .catch((error: unknown) => log.error('sandbox.webhook_failed', { eventId: event.eventId, error })),
      );
      return { ok: true, status: 'PENDING' };
    },
    // No money moved, so there is nothing to give back; the refund is confirmed at once.
    async refund() {
      return { ok: true };
    },
  };
}
