import * as z from 'zod/mini';
import type { GoodsView } from '../../../workers/kernel/views';

// The answers of the HTTP contract (DESIGN.md) as the pages read them. Optional fields are
// optional here too, so a deployment without a newer field still renders.

/** An ISO timestamp or epoch milliseconds, as epoch milliseconds. */
export const Instant = z.pipe(
  z.union([z.string(), z.number()]),
  z.transform((v, ctx) => {
    const ms = typeof v === 'number' ? v : Date.parse(v);
    if (Number.isNaN(ms)) {
      ctx.issues.push({ code: 'custom', message: 'not a time', input: v });
    }
    return ms;
  }),
);

const Count = z.number().check(z.int(), z.minimum(0));

export const Goods = z.object({
  goodsId: z.number(),
  activityId: z.optional(z.number()),
  title: z.string(),
  imageUrl: z.nullish(z.string()),
  priceCents: Count,
  totalStock: Count,
  remaining: z.number(),
  startAt: Instant,
  endAt: Instant,
  /** UPCOMING, ON_SALE, PAUSED, SOLD_OUT, ENDED (an unknown one is shown as-is). */
  status: z.string(),
  payTimeoutSeconds: z.optional(z.number()),
  serverTime: Instant,
  /** The waiting room: `off`, or joined with POST .../queue; its doors open at `opensAt`. */
  queue: z.optional(z.object({ mode: z.string(), opensAt: z.optional(Instant) })),
  /** Sale rules: units one shopper may hold (the page offers a quantity when above 1), and who may buy. */
  perUserLimit: z.optional(z.number().check(z.int(), z.minimum(1))),
  eligibility: z.optional(z.string()),
});
export type Goods = z.infer<typeof Goods>;
export const GoodsList = z.array(Goods);

type ReadableBy<T extends z.input<typeof Goods>> = T;
/**
 * The Worker's goods answer is the kernel's GoodsView; this schema is the page's reading of it
 * (times as epoch ms, newer fields optional). The compiler refuses a GoodsView it cannot read.
 */
export type GoodsAnswer = ReadableBy<GoodsView>;

export const DevToken = z.object({ token: z.string(), userId: z.optional(z.string()) });

/** A captcha: the built-in arithmetic prompt, Turnstile, or a kind this page may not know. */
export const Challenge = z.looseObject({
  challengeId: z.string(),
  kind: z.string(),
  prompt: z.optional(z.string()),
  siteKey: z.optional(z.string()),
  expiresAt: Instant,
  /** A proof of work to solve with the answer (when the operator turned it on). */
  pow: z.optional(z.object({ prefix: z.string(), difficulty: z.number(), algorithm: z.string() })),
});
export type Challenge = z.infer<typeof Challenge>;

export const PurchaseToken = z.object({ token: z.string(), path: z.string(), expiresAt: Instant });
export type PurchaseToken = z.infer<typeof PurchaseToken>;

export const Queued = z.object({ code: z.number(), message: z.string(), requestId: z.string() });

export const Result = z.object({
  requestId: z.string(),
  status: z.enum(['QUEUED', 'SUCCESS', 'FAIL']),
  orderId: z.optional(z.string()),
  reason: z.optional(z.string()),
});
export type Result = z.infer<typeof Result>;

/** GET /api/seckill/goods/:goodsId/eligibility: whether this shopper may buy, and what they hold. */
export const Eligibility = z.looseObject({ eligible: z.boolean(), perUserLimit: z.optional(z.number()), held: z.optional(z.number()) });

/** Order status names; the seed's numeric codes map onto them in the same order. */
export const ORDER_STATUSES = ['PENDING_PAYMENT', 'PAID', 'CANCELLED', 'CLOSED_TIMEOUT', 'REFUNDED'] as const;
export type OrderStatus = (typeof ORDER_STATUSES)[number] | 'UNKNOWN';

export const OrderStatusField = z.pipe(
  z.union([z.string(), z.number()]),
  z.transform((v): OrderStatus => {
    const name = typeof v === 'number' ? ORDER_STATUSES[v] : ORDER_STATUSES.find((s) => s === v);
    return name ?? 'UNKNOWN';
  }),
);

export const Order = z.object({
  orderId: z.string(),
  orderNo: z.optional(z.string()),
  goodsId: z.optional(z.number()),
  status: OrderStatusField,
  priceCents: z.optional(z.number()),
  /** Units of the order, and what they cost together (priceCents × quantity). */
  quantity: z.optional(z.number()),
  amountCents: z.optional(z.number()),
  payDeadline: z.optional(Instant),
  createdAt: z.optional(Instant),
  paidAt: z.nullish(Instant),
});
export type Order = z.infer<typeof Order>;

export const Payment = z.looseObject({ paymentId: z.string(), status: z.string(), provider: z.optional(z.string()) });

const OrderCounts = z.record(z.string(), z.number());

export const Stats = z.object({
  goodsId: z.optional(z.number()),
  totalStock: z.number(),
  doRemaining: z.nullable(z.number()),
  dbStock: z.number(),
  mirrorStock: z.nullish(z.number()),
  orders: OrderCounts,
  queued: z.optional(z.number()),
  outboxPending: z.number(),
  deadLetters: z.nullish(z.number()),
  consistent: z.boolean(),
  /** Units Postgres refused, held aside until reconciliation puts them back. */
  refusedUnits: z.optional(z.number()),
  /** Shoppers' result reads the stock shards hold until their orders are written (`?wait=`). */
  heldResultReads: z.optional(z.number()),
  /** Per stock shard, when the goods has several. */
  shards: z.optional(z.array(z.looseObject({ shard: z.number(), remaining: z.number(), queued: z.number(), confirmed: z.number() }))),
  /** The waiting room's figures (mode `off`: none). */
  queue: z.nullish(
    z.looseObject({
      mode: z.string(),
      active: z.optional(z.boolean()),
      waiting: z.number(),
      admittedPerSecond: z.number(),
      lastEtaSeconds: z.optional(z.number()),
      admitted: z.optional(z.number()),
      /** The room's shard count, and how many of them reported lately. */
      shards: z.optional(z.number()),
      shardsReporting: z.optional(z.number()),
      /** The room's measured delays the ETAs take (null: not yet measured). */
      frontLagMs: z.nullish(z.number()),
      lateMs: z.nullish(z.number()),
    }),
  ),
  /** The queue's settings, which the mode switch keeps. */
  queueSettings: z.optional(z.looseObject({ mode: z.string() })),
});
export type Stats = z.infer<typeof Stats>;

export const Limits = z.looseObject({
  perIpPerSecond: z.optional(z.number()),
  perUserPerSecond: z.optional(z.number()),
  admissionPerSecond: z.optional(z.number()),
});
export type Limits = z.infer<typeof Limits>;

export const Paused = z.looseObject({ goodsId: z.optional(z.number()), paused: z.optional(z.boolean()) });

/** The reconciliation report's shape is the operator's to read: kept whole and shown as JSON. */
export const AnyJson = z.unknown();
