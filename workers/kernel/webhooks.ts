import { z } from 'zod';
import { orderStatusName } from './order-status';

// The shop's webhooks: the events, the admin API's bodies, the queue message that carries a
// delivery, what a delivery POSTs and how it is signed (docs/operations.md shows the receiver's
// side). The outbox rows live in Postgres (db/webhooks.ts); the sender is workers/queue/webhooks.ts.

export const WEBHOOK_EVENTS = ['order.created', 'order.paid', 'order.closed', 'order.refunded'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

export const DELIVERY_STATUSES = ['PENDING', 'DELIVERED', 'FAILED'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** A delivery that has not reached a 2xx this long after its event (or its redelivery) is FAILED. */
export const WEBHOOK_GIVE_UP_MS = 24 * 3600_000;
/** One attempt waits this long for the shop's answer. */
export const WEBHOOK_TIMEOUT_MS = 10_000;
/** A claimed attempt that never recorded its outcome (the isolate died) may be taken over after this long. */
export const WEBHOOK_LEASE_MS = 60_000;

/** The event id the shop sees: one per order and event type, so a receiver can dedupe on it. */
export function webhookEventId(type: WebhookEvent, orderId: string): string {
  return `evt_${orderId}_${type.slice('order.'.length)}`;
}

/**
 * Where deliveries may go: an absolute https URL (http only when `allowHttp`, i.e. locally),
 * without credentials or a fragment. Returns what is wrong, or undefined.
 */
export function webhookUrlProblem(raw: string, allowHttp: boolean): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'must be an absolute URL';
  }
  if (url.protocol !== 'https:' && !(allowHttp && url.protocol === 'http:')) {
    return allowHttp ? 'must use https or http' : 'must use https';
  }
  if (url.username !== '' || url.password !== '') {
    return 'must not carry credentials (the signature authenticates the sender)';
  }
  if (url.hash !== '') {
    return 'must not have a fragment';
  }
  return undefined;
}

const EventList = z
  .array(z.enum(WEBHOOK_EVENTS, { error: `events are ${WEBHOOK_EVENTS.join(', ')}` }))
  .max(WEBHOOK_EVENTS.length)
  .refine((e) => new Set(e).size === e.length, 'events must not repeat');

/** PUT /admin/webhooks. `events: []` turns every delivery off and keeps the endpoint. */
export const PutWebhooksBody = z
  .object({
    url: z.string().min(1).max(2048),
    secret: z
      .string()
      .min(16, 'the secret must have at least 16 characters')
      .max(256)
      .regex(/^[\x21-\x7e]+$/, 'printable ASCII only'),
    events: EventList,
  })
  .strict();
export type PutWebhooksBody = z.infer<typeof PutWebhooksBody>;

/** GET /admin/webhooks/deliveries */
export const DeliveriesQuery = z
  .object({
    status: z.enum(DELIVERY_STATUSES).optional(),
    goodsId: z
      .string()
      .regex(/^[1-9][0-9]{0,15}$/, 'goods ids are positive integers')
      .transform(Number)
      .optional(),
    orderId: z
      .string()
      .regex(/^[1-9][0-9]{0,15}-[0-9]{1,12}$/, 'not an order id')
      .optional(),
    limit: z.coerce.number().int().min(1).max(500).default(100),
  })
  .strict();
export type DeliveriesQuery = z.infer<typeof DeliveriesQuery>;

export const DeliveryParam = z.object({
  id: z.string().regex(/^evt_[0-9]{1,16}-[0-9]{1,12}_(created|paid|closed|refunded)$/, 'not an event id'),
});

/** The webhook queue's message: which delivery to attempt (the row holds the rest). */
export const WebhookMessage = z.object({ v: z.literal(1), kind: z.literal('webhook'), deliveryId: z.string().min(1).max(128) });
export type WebhookMessage = z.infer<typeof WebhookMessage>;

/** The order fields an event carries, as the shop's API shows an order. */
export type WebhookOrder = {
  orderId: string;
  orderNo: string;
  goodsId: number;
  activityId: number;
  userId: string;
  status: string;
  priceCents: number;
  /** Units of the order; the shopper pays priceCents × quantity. */
  quantity: number;
  amountCents: number;
  payDeadline: string;
  createdAt: string;
  paidAt: string | null;
  closedAt: string | null;
};

/** An order row's (or a just-written order's) fields as an event's `data.order`. */
export function webhookOrder(o: {
  id: string;
  orderNo: string;
  goodsId: number;
  activityId: number;
  userId: string;
  status: number;
  priceCents: number;
  quantity: number;
  payDeadline: Date;
  createdAt: Date;
  paidAt: Date | null;
  closedAt: Date | null;
}): WebhookOrder {
  return {
    orderId: o.id,
    orderNo: o.orderNo,
    goodsId: o.goodsId,
    activityId: o.activityId,
    userId: o.userId,
    status: orderStatusName(o.status),
    priceCents: o.priceCents,
    quantity: o.quantity,
    amountCents: o.priceCents * o.quantity,
    payDeadline: o.payDeadline.toISOString(),
    createdAt: o.createdAt.toISOString(),
    paidAt: o.paidAt?.toISOString() ?? null,
    closedAt: o.closedAt?.toISOString() ?? null,
  };
}

/** The JSON body a delivery POSTs: the same bytes on every attempt of the event. */
export function webhookBody(event: { id: string; type: string; createdAt: Date; payload: unknown }): string {
  return JSON.stringify({ id: event.id, type: event.type, createdAt: event.createdAt.toISOString(), data: event.payload });
}
