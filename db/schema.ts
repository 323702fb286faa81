import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  smallint,
  text,
  timestamp,
  uniqueIndex,
} from 'drizzle-orm/pg-core';
import type { Eligibility, LimitScope } from '../workers/kernel/contract';
import { ORDER_STATUS } from '../workers/kernel/order-status';
import type { QueueSettings } from '../workers/kernel/waiting-room';

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow();
const updatedAt = () => timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow();

/** Seckill goods: the sale's settings and the database's copy of the remaining stock. */
export const seckillGoods = pgTable(
  'seckill_goods',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    activityId: bigint('activity_id', { mode: 'number' }).notNull(),
    title: text('title').notNull(),
    imageUrl: text('image_url'),
    priceCents: integer('price_cents').notNull(),
    totalStock: integer('total_stock').notNull(),
    /** Units not held by a live (pending or paid) order; moved only by guarded updates. */
    stock: integer('stock').notNull(),
    startAt: timestamp('start_at', { withTimezone: true, mode: 'date' }).notNull(),
    endAt: timestamp('end_at', { withTimezone: true, mode: 'date' }).notNull(),
    /** 0 on sale (inside its window), 1 paused by an operator. */
    status: smallint('status').notNull().default(0),
    payTimeoutSeconds: integer('pay_timeout_seconds').notNull().default(900),
    /** Cloudflare Durable Object location hint for the goods' stock object. */
    locationHint: text('location_hint'),
    /** The waiting room: `{mode, admitPerSecond?, preQueueSeconds?, passSeconds?}` (workers/kernel/waiting-room.ts). */
    queue: jsonb('queue').$type<QueueSettings>().notNull().default({ mode: 'off' }),
    /** Stock shards: how many objects hold the goods' stock (durable-objects/routing.ts). */
    shards: integer('shards').notNull().default(1),
    /** Units one shopper may hold (over one or several orders). */
    perUserLimit: smallint('per_user_limit').notNull().default(1),
    /** `goods`, or `activity`: one live order per shopper across the activity's goods. */
    limitScope: text('limit_scope').$type<LimitScope>().notNull().default('goods'),
    /** `open`, or `allowlist`: only the shoppers of seckill_allowlist may buy. */
    eligibility: text('eligibility').$type<Eligibility>().notNull().default('open'),
    /**
     * Moved by every change of the goods' allowlist, after the change: the edge keeps the list's
     * fingerprints per version (workers/edge/allowlist-copies.ts) and learns of a new one with the
     * goods list.
     */
    allowlistVersion: integer('allowlist_version').notNull().default(0),
    /**
     * The `Idempotency-Key` of the `POST /admin/goods` that created the goods, and a digest of
     * that request's body: the same key again answers this goods instead of making another.
     */
    createKey: text('create_key'),
    createDigest: text('create_digest'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    check('seckill_goods_stock_range', sql`${t.stock} >= 0 AND ${t.stock} <= ${t.totalStock}`),
    check('seckill_goods_price', sql`${t.priceCents} >= 0`),
    check('seckill_goods_window', sql`${t.endAt} > ${t.startAt}`),
    check('seckill_goods_pay_timeout', sql`${t.payTimeoutSeconds} BETWEEN 1 AND 43200`),
    check('seckill_goods_shards', sql`${t.shards} BETWEEN 1 AND 64`),
    check('seckill_goods_per_user_limit', sql`${t.perUserLimit} BETWEEN 1 AND 100`),
    check('seckill_goods_limit_scope', sql`${t.limitScope} IN ('goods', 'activity')`),
    check('seckill_goods_eligibility', sql`${t.eligibility} IN ('open', 'allowlist')`),
    index('seckill_goods_window_idx').on(t.startAt, t.endAt),
    uniqueIndex('seckill_goods_create_key_uk').on(t.createKey).where(sql`${t.createKey} IS NOT NULL`),
  ],
);

export { ORDER_STATUS, type OrderStatusName } from '../workers/kernel/order-status';

/** Orders. Ids come from the goods' Durable Object, so a redelivered message inserts nothing. */
export const seckillOrder = pgTable(
  'seckill_order',
  {
    id: text('id').primaryKey(),
    orderNo: text('order_no').notNull(),
    requestId: text('request_id').notNull(),
    userId: text('user_id').notNull(),
    goodsId: bigint('goods_id', { mode: 'number' })
      .notNull()
      .references(() => seckillGoods.id),
    activityId: bigint('activity_id', { mode: 'number' }).notNull(),
    /** The unit price; the order's amount is priceCents × quantity. */
    priceCents: integer('price_cents').notNull(),
    quantity: smallint('quantity').notNull().default(1),
    /** The goods' limit scope when the order was made: `activity` orders meet the activity's unique index. */
    limitScope: text('limit_scope').$type<LimitScope>().notNull().default('goods'),
    /** The goods' per-shopper limit when the order was made (1: the one-live-order index applies). */
    perUserLimit: smallint('per_user_limit').notNull().default(1),
    status: smallint('status').notNull().default(ORDER_STATUS.PENDING_PAYMENT),
    reservedAt: timestamp('reserved_at', { withTimezone: true, mode: 'date' }).notNull(),
    payDeadline: timestamp('pay_deadline', { withTimezone: true, mode: 'date' }).notNull(),
    paidAt: timestamp('paid_at', { withTimezone: true, mode: 'date' }),
    closedAt: timestamp('closed_at', { withTimezone: true, mode: 'date' }),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    uniqueIndex('seckill_order_order_no_uk').on(t.orderNo),
    uniqueIndex('seckill_order_request_id_uk').on(t.requestId),
    // One live order per user and goods where a shopper may hold one unit; a cancelled or closed
    // one lets the user buy again. A larger limit is held by the goods' object (one per goods).
    uniqueIndex('seckill_order_user_goods_live_uk')
      .on(t.userId, t.goodsId)
      .where(sql`${t.status} IN (0, 1) AND ${t.perUserLimit} = 1 AND ${t.limitScope} = 'goods'`),
    // The seed's UNIQUE(user_id, activity_id): one live order per shopper across an activity's
    // `activity`-scoped goods, the final guard behind the goods' objects (which see only their own).
    uniqueIndex('seckill_order_user_activity_live_uk')
      .on(t.userId, t.activityId)
      .where(sql`${t.status} IN (0, 1) AND ${t.limitScope} = 'activity'`),
    index('seckill_order_goods_status_idx').on(t.goodsId, t.status),
    // An `activity`-scoped sale's orders by the time they last changed: the edge's copies of who
    // holds one read the changes since their last read (db/holders.ts).
    index('seckill_order_activity_changes_idx').on(t.activityId, t.updatedAt).where(sql`${t.limitScope} = 'activity'`),
    // A per-goods sale's orders by the time they last changed: the edge's copies of the units each
    // shopper holds (the page's eligibility answer) read the changes since their last read.
    index('seckill_order_goods_changes_idx').on(t.goodsId, t.updatedAt).where(sql`${t.limitScope} = 'goods'`),
    // A shopper's orders of a goods: the units they hold (the eligibility answer).
    index('seckill_order_user_goods_idx').on(t.userId, t.goodsId),
    index('seckill_order_pending_deadline_idx').on(t.payDeadline).where(sql`${t.status} = 0`),
  ],
);

/** The shoppers an `allowlist` goods is open to (copied into the goods' object, which checks it too). */
export const seckillAllowlist = pgTable(
  'seckill_allowlist',
  {
    goodsId: bigint('goods_id', { mode: 'number' })
      .notNull()
      .references(() => seckillGoods.id),
    userId: text('user_id').notNull(),
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.goodsId, t.userId] })],
);

/** Business keys of consumed messages (e.g. `order:<requestId>`), so a redelivery is a no-op. */
export const mqConsumeLog = pgTable('mq_consume_log', {
  messageId: text('message_id').primaryKey(),
  queue: text('queue').notNull(),
  /** 0 done, 1 rejected (the reservation was released). */
  status: smallint('status').notNull(),
  detail: text('detail'),
  createdAt: createdAt(),
});

/** Payments started for an order with a provider. */
export const payment = pgTable(
  'payment',
  {
    id: text('id').primaryKey(),
    orderId: text('order_id')
      .notNull()
      .references(() => seckillOrder.id),
    provider: text('provider').notNull(),
    amountCents: integer('amount_cents').notNull(),
    /** PENDING, SUCCEEDED, FAILED, REFUNDED */
    status: text('status').notNull().default('PENDING'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('payment_order_idx').on(t.orderId)],
);

/** Provider webhook events, once each. */
export const paymentEvent = pgTable('payment_event', {
  eventId: text('event_id').primaryKey(),
  paymentId: text('payment_id').notNull(),
  orderId: text('order_id').notNull(),
  status: text('status').notNull(),
  amountCents: integer('amount_cents').notNull(),
  /** What the event did: PAID, REFUNDED, FAILED, IGNORED. */
  outcome: text('outcome').notNull(),
  receivedAt: timestamp('received_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
});

/** Refunds of payments that arrived for orders no longer payable. */
export const refund = pgTable(
  'refund',
  {
    id: text('id').primaryKey(),
    orderId: text('order_id').notNull(),
    paymentId: text('payment_id').notNull(),
    amountCents: integer('amount_cents').notNull(),
    reason: text('reason').notNull(),
    status: text('status').notNull().default('PENDING'),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('refund_payment_uk').on(t.paymentId)],
);

/** Messages that exhausted their retries, kept for an operator to re-drive. */
export const deadLetter = pgTable(
  'dead_letter',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    queue: text('queue').notNull(),
    messageKey: text('message_key').notNull(),
    goodsId: bigint('goods_id', { mode: 'number' }),
    body: jsonb('body').notNull(),
    attempts: integer('attempts').notNull(),
    createdAt: createdAt(),
    redrivenAt: timestamp('redriven_at', { withTimezone: true, mode: 'date' }),
  },
  (t) => [uniqueIndex('dead_letter_key_uk').on(t.queue, t.messageKey), index('dead_letter_goods_idx').on(t.goodsId)],
);

/** One row per goods per reconciliation run: what was compared, found and repaired. */
export const reconciliationReport = pgTable(
  'reconciliation_report',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    goodsId: bigint('goods_id', { mode: 'number' }).notNull(),
    runAt: timestamp('run_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    doRemaining: integer('do_remaining'),
    dbStock: integer('db_stock').notNull(),
    mirrorStock: integer('mirror_stock'),
    liveOrders: integer('live_orders').notNull(),
    consistent: boolean('consistent').notNull(),
    discrepancies: jsonb('discrepancies').notNull(),
    actions: jsonb('actions').notNull(),
  },
  (t) => [index('reconciliation_report_goods_idx').on(t.goodsId, t.runAt)],
);

/** The shop's webhook endpoint: at most one row (id 1). No row, or no events, means webhooks are off. */
export const webhookConfig = pgTable(
  'webhook_config',
  {
    id: smallint('id').primaryKey().default(1),
    url: text('url').notNull(),
    secret: text('secret').notNull(),
    /** The event types sent: order.created, order.paid, order.closed, order.refunded. */
    events: text('events').array().notNull(),
    updatedAt: updatedAt(),
  },
  (t) => [check('webhook_config_single_row', sql`${t.id} = 1`)],
);

/**
 * The webhooks' outbox and delivery log: one row per event, written in the transaction of the
 * order change it tells (so none is lost and none is sent for a change that rolled back). The
 * id is the event id the shop sees; it is derived from the order and the event type, so a
 * repeated change writes nothing and a redelivery keeps it.
 */
export const webhookDelivery = pgTable(
  'webhook_delivery',
  {
    id: text('id').primaryKey(),
    type: text('type').notNull(),
    orderId: text('order_id').notNull(),
    goodsId: bigint('goods_id', { mode: 'number' }).notNull(),
    payload: jsonb('payload').notNull(),
    /** PENDING, DELIVERED, FAILED */
    status: text('status').notNull().default('PENDING'),
    attempts: integer('attempts').notNull().default(0),
    /** When the next attempt is due; while one is in flight, when it may be taken over. */
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /** Retries stop (FAILED) a fixed time after this: the event's creation, or its last redelivery. */
    retrySince: timestamp('retry_since', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    lastAttemptAt: timestamp('last_attempt_at', { withTimezone: true, mode: 'date' }),
    lastStatusCode: integer('last_status_code'),
    lastError: text('last_error'),
    deliveredAt: timestamp('delivered_at', { withTimezone: true, mode: 'date' }),
    createdAt: createdAt(),
  },
  (t) => [
    index('webhook_delivery_goods_status_idx').on(t.goodsId, t.status),
    index('webhook_delivery_created_idx').on(t.createdAt),
    index('webhook_delivery_pending_due_idx').on(t.nextAttemptAt).where(sql`${t.status} = 'PENDING'`),
  ],
);
