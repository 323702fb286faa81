import { z } from 'zod';
import type { Limits } from './limits';

// Every payload that crosses a boundary is a schema, its type inferred from it: the ids and
// what crosses the queues and RPC here, the HTTP requests' bodies and params in http-bodies.ts.
// Queue messages carry `v` so a later format can coexist with this one.

/**
 * A goods id, as a JSON number or as the digits of a path or query segment. Strict on purpose:
 * no coercion of `true`, `"1e3"`, `" 12"` or `"0x10"` into some other goods.
 */
export const GoodsId = z.union([
  z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  z
    .string()
    .regex(/^[1-9][0-9]{0,15}$/, 'goods ids are positive integers')
    .transform(Number)
    .pipe(z.number().max(Number.MAX_SAFE_INTEGER, 'goods id too large')),
]);
export const UserId = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.:@-]+$/, 'letters, digits and _ . : @ - only');
/** UserId's pattern and lengths as one expression, for the readings without zod (order-messages.ts). */
export const USER_ID = /^[A-Za-z0-9_.:@-]{1,64}$/;
export const REQUEST_ID = /^[1-9][0-9]{0,15}\.[A-Za-z0-9_-]{22}$/;
export const ORDER_ID = /^[1-9][0-9]{0,15}-[0-9]{1,12}$/;
/** `<goodsId>.<22 url-safe chars>`: the goods is part of the id so a result finds its object. */
export const RequestId = z.string().regex(REQUEST_ID, 'not a request id');
export const OrderId = z.string().regex(ORDER_ID, 'not an order id');
export const IdempotencyKey = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII only');

/** What a shopper's reservation carries into the goods' Durable Object. */
export const ReserveItem = z.object({
  requestId: RequestId,
  userId: UserId,
  tokenId: z.string().min(8).max(64),
  tokenExpiresAt: z.number().int(),
  /** true when the client sent an Idempotency-Key: its rejections are remembered too. */
  keyed: z.boolean(),
  /** Units asked for (1 when absent: callers before sale rules sent none). */
  quantity: z.number().int().min(1).max(100).optional(),
  /** The token was issued to a shopper the waiting room let in (absent: not, or an edge before it). */
  admitted: z.literal(true).optional(),
});
export type ReserveItem = z.infer<typeof ReserveItem>;

export const FAIL_REASONS = [
  'SOLD_OUT',
  'ALREADY_PURCHASED',
  'NOT_STARTED',
  'ENDED',
  'PAUSED',
  'TOKEN_INVALID',
  'NOT_FOUND',
  'BUSY',
  'CANCELLED',
  'CLOSED_TIMEOUT',
  'ORDER_FAILED',
  'LIMIT_REACHED',
  'NOT_ELIGIBLE',
] as const;
export type FailReason = (typeof FAIL_REASONS)[number];

/**
 * How long a goods' object keeps naming a keyed purchase it accepted in its SOLD_OUT answers: a
 * purchase token lives 60 s and the edge accepts a keyed retry up to 3 minutes after its
 * token expired; one minute more covers clocks that differ.
 */
export const ACCEPTED_KEYED_WINDOW_MS = 5 * 60_000;
/** At most this many request ids in one SOLD_OUT answer; beyond, `acceptedKeyedTruncated`. */
export const ACCEPTED_KEYED_MAX = 2_000;

/**
 * What a SOLD_OUT answer of the goods' object also says: the request ids of the keyed purchases
 * (sent with an Idempotency-Key) it accepted within ACCEPTED_KEYED_WINDOW_MS, newest last. Only
 * those may skip the edge's sold-out fast path (a retry is owed its 202 again); when
 * `acceptedKeyedTruncated`, there were more than ACCEPTED_KEYED_MAX and the list is not complete.
 */
export type SoldOutNote = { acceptedKeyed: string[]; acceptedKeyedTruncated: boolean };

export type ReserveOutcome =
  | { ok: true; requestId: string; orderId: string; replay: boolean }
  | ({ ok: false; requestId: string; reason: FailReason; replay: boolean; remaining?: number } & Partial<SoldOutNote>);

/** Units one shopper may hold of a goods: the contract's 1-100, default 1. */
export const PerUserLimit = z.number().int().min(1).max(100);
/** `goods`: the limit is per goods; `activity`: one live order per shopper across the activity's goods. */
export const LimitScope = z.enum(['goods', 'activity']);
export type LimitScope = z.infer<typeof LimitScope>;
export const Eligibility = z.enum(['open', 'allowlist']);
export type Eligibility = z.infer<typeof Eligibility>;

/** Order message: one reservation on its way to Postgres (producer-made ids). */
export const OrderMessage = z.object({
  v: z.literal(1),
  kind: z.literal('reserve'),
  requestId: RequestId,
  orderId: OrderId,
  orderNo: z.string().min(1).max(64),
  userId: UserId,
  goodsId: z.number().int().positive(),
  activityId: z.number().int(),
  priceCents: z.number().int().nonnegative(),
  payTimeoutSeconds: z.number().int().positive(),
  reservedAt: z.number().int(),
  /** The stock shard holding the reservation (absent: shard 0), where its settlement goes. */
  shard: z.number().int().min(0).max(63).optional(),
  /** Units of the order (absent in messages made before sale rules: 1). */
  quantity: z.number().int().min(1).max(100).optional(),
  /** The goods' limit scope when reserved (absent: goods); `activity` orders meet the activity's unique index. */
  limitScope: LimitScope.optional(),
  /** The goods' per-shopper limit when reserved (absent: 1). */
  perUserLimit: PerUserLimit.optional(),
});
export type OrderMessage = z.infer<typeof OrderMessage>;

/** Orders one pack carries at most; the object's outbox also keeps a pack under PACK_BYTES_MAX. */
export const PACK_ORDERS_MAX = 100;

/**
 * Order pack: several reservations of one goods in one queue message. The queue's cost is per
 * message (its broker's, and the consumer's batch size counts messages), so the goods' object
 * sends what one flush of its outbox holds as packs. Each order in it is what a lone message
 * would carry; the consumer takes both forms, and a dead pack is kept one row per order.
 */
export const OrderPack = z
  .object({
    v: z.literal(1),
    kind: z.literal('reserve-pack'),
    goodsId: z.number().int().positive(),
    orders: z.array(OrderMessage).min(1).max(PACK_ORDERS_MAX),
  })
  .refine((p) => p.orders.every((o) => o.goodsId === p.goodsId), { message: 'a pack carries one goods' });
export type OrderPack = z.infer<typeof OrderPack>;

/** What the order queue carries: a lone reservation (a re-driven dead letter, say) or a pack. */
export type OrderQueueMessage = OrderMessage | OrderPack;

/** Delayed message that closes an order still unpaid at its deadline. */
export const TimeoutMessage = z.object({
  v: z.literal(1),
  kind: z.literal('pay-timeout'),
  orderId: OrderId,
  goodsId: z.number().int().positive(),
});
export type TimeoutMessage = z.infer<typeof TimeoutMessage>;

/** Timeout pack: the payment timeouts of the orders one consumer batch made of one goods, due together. */
export const TimeoutPack = z.object({
  v: z.literal(1),
  kind: z.literal('pay-timeout-pack'),
  goodsId: z.number().int().positive(),
  orderIds: z.array(OrderId).min(1).max(PACK_ORDERS_MAX),
});
export type TimeoutPack = z.infer<typeof TimeoutPack>;

/** The timeouts a message of the timeout queue carries (a lone one or a pack), or null when it is neither. */
export function parseTimeoutQueueMessage(body: unknown): TimeoutMessage[] | null {
  const kind = typeof body === 'object' && body !== null && 'kind' in body ? body.kind : undefined;
  if (kind === 'pay-timeout-pack') {
    const pack = TimeoutPack.safeParse(body);
    return pack.success
      ? pack.data.orderIds.map((orderId) => ({ v: 1 as const, kind: 'pay-timeout' as const, orderId, goodsId: pack.data.goodsId }))
      : null;
  }
  const one = TimeoutMessage.safeParse(body);
  return one.success ? [one.data] : null;
}

/** What the consumer tells the goods' object once Postgres has answered. */
export type Settlement = { requestId: string; ok: true; orderId: string } | { requestId: string; ok: false; reason: FailReason };

/** Goods settings the stock object needs (from Postgres). */
export const GoodsInit = z.object({
  goodsId: z.number().int().positive(),
  activityId: z.number().int(),
  title: z.string(),
  priceCents: z.number().int().nonnegative(),
  totalStock: z.number().int().nonnegative(),
  /** Units free in Postgres at init: used only the first time the object is created. */
  stock: z.number().int().nonnegative(),
  startAt: z.number().int(),
  endAt: z.number().int(),
  paused: z.boolean(),
  payTimeoutSeconds: z.number().int().positive(),
  /** Stock shards of the goods (absent or 1: one object holds all of it). */
  shards: z.number().int().min(1).max(64).optional(),
  /** Where the goods' objects are placed (shards made by shard 0 get the same hint). */
  locationHint: z.string().nullable().optional(),
  /** Absent from callers before sale rules: 1, `goods`, `open`. */
  perUserLimit: PerUserLimit.optional(),
  limitScope: LimitScope.optional(),
  eligibility: Eligibility.optional(),
});
export type GoodsInit = z.infer<typeof GoodsInit>;

export type StockSnapshot = {
  goodsId: number;
  initialized: true;
  totalStock: number;
  remaining: number;
  startAt: number;
  endAt: number;
  paused: boolean;
  /** Reservations accepted and not settled by the order consumer yet (each keeps its outbox row). */
  queued: number;
  confirmed: number;
  /** Of `queued` and `confirmed`, the reservations of shoppers the waiting room let in (absent from objects before schema 6). */
  admittedQueued?: number;
  admittedConfirmed?: number;
  /** Units Postgres refused (it held less stock than the object): held aside, neither for sale nor sold. */
  refused: number;
  /** When the oldest unsettled reservation was accepted (null when none). */
  oldestQueuedAt: number | null;
  /** Order messages the queue has not taken yet, and when the oldest of them was accepted. */
  outboxPending: number;
  oldestOutboxAt: number | null;
  /** Since when the Redis mirror lags this object (a failed write not yet repaired), or null. */
  mirrorStaleSince: number | null;
  /** Reservations this object instance has been asked for (edge admission shows up here). */
  reserveRequests: number;
  /** Result reads this instance holds for their final answer now (`?wait=`); absent from a shard of an earlier build. */
  heldResultReads?: number;
  /** This object's shard and the goods' shard count (0 and 1 for a one-shard goods). */
  shard?: number;
  shards?: number;
  /**
   * Shard 0 of a sharded goods: its own units plus what the other shards last reported, a
   * figure for the waiting room that costs no call per shard (stats add the shards up exactly).
   */
  goodsRemaining?: number;
  /** Calls to other shards this instance made (grants asked, give-backs asked): how rarely shards need the pool. */
  poolCalls?: number;
  /** While one of its batches waits for stock: the units it holds that no such batch wants. */
  free?: number;
};

/**
 * The longest a result read is held for its final answer (`GET /api/seckill/result/:requestId?wait=N`,
 * the stock object's `result(requestId, waitMs)`), in seconds.
 */
export const MAX_RESULT_WAIT_SECONDS = 20;

export type ResultView = {
  requestId: string;
  userId: string;
  status: 'QUEUED' | 'SUCCESS' | 'FAIL';
  orderId?: string;
  reason?: FailReason;
};

// Edge guard RPC: a sale request's client keys, the ban policy, and the verdict.

/** One client identity to check: `id` is `ip:<addr>` or `user:<id>`; `scope` names its rate window. */
export const AdmitKey = z.object({
  id: z.string().min(3).max(200),
  scope: z.string().min(1).max(32),
  perSecond: z.number().int().positive(),
});
export type AdmitKey = z.infer<typeof AdmitKey>;

export const BanPolicy = z.object({
  threshold: z.number().int().positive(),
  windowMs: z.number().int().positive(),
  durationMs: z.number().int().positive(),
});
export type BanPolicy = z.infer<typeof BanPolicy>;

export type AdmitVerdict =
  | { ok: true }
  | { ok: false; reason: 'RATE_LIMITED'; id: string; retryAfterMs: number }
  | { ok: false; reason: 'BANNED'; id: string; retryAfterMs: number };

/** Requests of one client key an isolate answered on its own, reported to the key's guard shard. */
export type AnsweredCount = { id: string; hits: number };
/** A ban in force for a client key, as a guard shard reports it back. */
export type KnownBan = { id: string; retryAfterMs: number };

/** One rate window of a key as an isolate saw it since its last report: requests, and the times of those it admitted. */
export type WindowReport = { scope: string; perSecond: number; seen: number; admitted: number[] };
/**
 * What an isolate tells a key's guard shard in the background: requests counted toward a ban,
 * its rate windows, a ban it decided itself (`bannedUntil`), or `check`: it refuses the key on a
 * ban it heard of a while ago and asks whether it still holds.
 */
export type KeyReport = { id: string; hits: number; windows: WindowReport[]; bannedUntil?: number; check?: boolean };
/** One isolate's accounting for one guard shard. */
export type GuardReport = { isolate: string; policy: BanPolicy; keys: KeyReport[] };
/** The isolate's share of a window's limit across the isolates that see the key, and how long the window is full fleet-wide. */
export type WindowShare = { id: string; scope: string; perSecond: number; limit: number; blockedMs: number };
/**
 * A guard shard's answer to a report: bans in force, bans checked and no longer in force, window
 * shares, and while it hears more reports than it wants, how many times less often to report.
 */
export type GuardReply = { bans: KnownBan[]; lifted: string[]; shares: WindowShare[]; slowdown?: number };
/** The most a guard shard slows the isolates' reports (4 s apart at the 0.5 s base): the fleet's view of a client's windows gets no staler. */
export const GUARD_MAX_SLOWDOWN = 8;

/** The runtime limits as the limits store answers them. */
export type StoredLimits = { limits: Limits; updatedAt: string | null };
export type BanView = { id: string; until: string; createdAt: string };
/** The limits record as builds before the limits store kept it (JSON text and its change time). */
export type LegacyLimits = { value: string; updatedAt: number };
/** Admission permits leased to an isolate, or how long until the gate has some. */
export type Lease = { granted: number; retryAfterMs: number };
/**
 * An isolate's share of a goods' admission rate: permits a second, for `validMs`; it renews after
 * `renewMs`, in the background. A gate of an earlier build sends no `renewMs` (the isolate then
 * renews halfway through the share's life).
 */
export type RateShare = { perSecond: number; validMs: number; renewMs?: number };

/** Where a goods' stock object may be placed (Cloudflare's Durable Object location hints). */
export const LOCATION_HINTS = ['wnam', 'enam', 'sam', 'weur', 'eeur', 'apac', 'oc', 'afr', 'me'] as const;
export const LocationHint = z.enum(LOCATION_HINTS);

/** What addresses a goods' objects: its id and the location hint its stock object is made with. A goods row fits. */
export type GoodsPlacement = {
  id: number;
  locationHint: string | null;
  /** Stock shards (1 when absent): which objects hold the goods' stock. */
  shards?: number;
  /** Waiting-room shards (ROOM_SHARDS when absent): which room shard a shopper's live channel is on. */
  roomShards?: number;
};
