import { z } from 'zod';

// The waiting room's contract: the goods' queue settings (admin API, Postgres column), what the
// edge tells a room object about its goods, and the RPC shapes between the room's shards and its
// coordinator. The rules themselves live in durable-objects/waiting-room/.

export const QUEUE_MODES = ['off', 'auto', 'always'] as const;
export type QueueMode = (typeof QUEUE_MODES)[number];

/** Admissions per second when a goods sets none: half the ~1,000 requests/s one stock object is documented to sustain. */
export const DEFAULT_ADMIT_PER_SECOND = 500;
/** How long an admission pass lets its shopper ask for purchase tokens. */
export const DEFAULT_PASS_SECONDS = 120;

/** Shards of one goods' waiting room when its settings name none: a shopper always lands on the same one (a hash of the user id). */
export const ROOM_SHARDS = 32;
export const MAX_ROOM_SHARDS = 128;
/**
 * Admissions a second one room shard is asked to carry at most (`admitPerSecond` ≤ this ×
 * `shards` when a goods names its shard count): each is a push on the shard's live channels,
 * on top of its joins, within the ~1,000 requests a second one object is documented to take.
 */
export const ADMIT_PER_SHARD = 500;

/** A goods' waiting-room settings, as POST/PUT /admin/goods take them and the goods row keeps them. */
export const QueueSettings = z
  .object({
    mode: z.enum(QUEUE_MODES),
    /** Shoppers let out of the line per second (default DEFAULT_ADMIT_PER_SECOND). */
    admitPerSecond: z.number().int().min(1).max(100_000).optional(),
    /** Shoppers who join in this many seconds before the start are shuffled at the start (0: no pre-queue). */
    preQueueSeconds: z.number().int().min(0).max(86_400).optional(),
    /** How long an admission pass stays usable (default DEFAULT_PASS_SECONDS). */
    passSeconds: z.number().int().min(10).max(3_600).optional(),
    /**
     * Shards of the room (default ROOM_SHARDS): about 1,000 arrivals a second each, fixed once
     * the room opens. A PUT that leaves it out keeps the goods' count.
     */
    shards: z.number().int().min(1).max(MAX_ROOM_SHARDS).optional(),
  })
  .strict()
  .refine((q) => q.shards === undefined || (q.admitPerSecond ?? DEFAULT_ADMIT_PER_SECOND) <= ADMIT_PER_SHARD * q.shards, {
    message: `a room admits at most ${ADMIT_PER_SHARD} shoppers a second per shard: raise queue.shards or lower admitPerSecond`,
    path: ['shards'],
  });
export type QueueSettings = z.infer<typeof QueueSettings>;

export const QUEUE_OFF: QueueSettings = { mode: 'off' };

/** Settings read back from storage written by any version: anything unreadable is `off`. */
export function readQueueSettings(raw: unknown): QueueSettings {
  const parsed = QueueSettings.safeParse(raw);
  return parsed.success ? parsed.data : QUEUE_OFF;
}

/** The shard count of a goods' room. */
export function roomShardsOf(q: QueueSettings): number {
  return q.shards ?? ROOM_SHARDS;
}

/** What a room object knows of its goods; the edge sends it with every call (a goods row gives it). */
export const RoomGoods = z.object({
  goodsId: z.number().int().positive(),
  locationHint: z.string().nullable(),
  startAt: z.number(),
  endAt: z.number(),
  paused: z.boolean(),
  mode: z.enum(QUEUE_MODES),
  admitPerSecond: z.number().int().positive(),
  preQueueSeconds: z.number().int().nonnegative(),
  passSeconds: z.number().int().positive(),
  /** The room's shard count (settings written before it existed: ROOM_SHARDS). */
  shards: z.number().int().positive().default(ROOM_SHARDS),
  /** The most units one shopper may buy (the goods' perUserLimit); absent from an edge of an earlier build. */
  unitsPerShopper: z.number().int().positive().optional(),
});
export type RoomGoods = z.infer<typeof RoomGoods>;

/** When the room opens its doors: the pre-queue's start, or the sale's start without one. */
export function opensAt(goods: Pick<RoomGoods, 'startAt' | 'preQueueSeconds'>): number {
  return goods.startAt - goods.preQueueSeconds * 1000;
}

export type TicketState = 'WAITING' | 'ADMITTED' | 'SOLD_OUT' | 'EXPIRED';

/** A purchase's settled answer, as the live channel pushes it. */
export type RoomResult = {
  requestId: string;
  status: 'SUCCESS' | 'FAIL';
  orderId?: string;
  reason?: string;
};

/** A result on its way from the order consumer to the shopper's shard. */
export type ShopperResult = RoomResult & { userId: string };

/** A shopper's place in the room, as its shard answers it (the edge adds the signed ticket). */
export type TicketView = {
  ticketId: string;
  userId: string;
  state: TicketState;
  /** Shoppers ahead in the whole room (every shard), not yet admitted. */
  position: number;
  etaSeconds: number;
  /** Units not held by any order or reservation, as the coordinator last read them. */
  remaining: number;
  /** The ticket's place in the one global order; null until the pre-queue is drawn. */
  orderKey: string | null;
  /** Joined in the pre-queue (ordered by the draw at the start). */
  preQueue: boolean;
  /** The admission round that let this ticket in (rounds never go back in the order). */
  round: number | null;
  /** Admitted: when, the pass, and when the pass stops working. */
  admittedAt?: number;
  pass?: string;
  expiresAt?: number;
  /** A purchase result the shard has heard of for this shopper. */
  result?: RoomResult;
};

export type JoinOutcome = { ok: true; view: TicketView } | { ok: false; reason: 'NOT_STARTED' | 'ENDED' };

/**
 * Keys in ascending order, each with a count: in a report its rank among the shard's waiting
 * keys (how many are smaller), in a reply the shoppers ahead of it in the whole room.
 */
export type Ladder = { keys: string[]; counts: number[] };

/** What a shard tells the coordinator about once a second. */
export type ShardReport = {
  goods: RoomGoods;
  shard: number;
  /** Waiting tickets that have an order key. */
  waiting: number;
  /** Pre-queue tickets waiting for the draw. */
  unkeyed: number;
  /** Waiting tickets at or below the last cursor this shard knows: admitted when their round comes. */
  covered: number;
  /** The first `exact` waiting keys (consecutive ranks), then a sample of the rest, ascending. */
  keys: Ladder;
  exact: number;
  /** Every waiting key of this shard below this one is in `keys` (exclusive bound). */
  horizon: string;
  /**
   * Nothing waiting here (no key above the cursor, no pre-queue ticket), and the shard reports
   * its next waiting shopper before answering that join: until then it holds nobody else's
   * order back, however long it stays idle. Absent: the horizon holds (older shards).
   */
  quiet?: boolean;
  /** Admitted tickets whose pass or token may still buy, with no result yet. */
  outstanding: number;
  /** Joins and token requests since the last report (the demand `auto` watches). */
  arrivals: number;
  /** Totals since the shard started keeping them. */
  joined: number;
  admitted: number;
  messages: number;
  live: number;
  /** The last admission round this shard knows. */
  round: number;
  /** When the shard made the report, by its clock (its keys' join times are too). */
  at?: number;
  /** How many of its waiting shoppers joined a second lately (rules.ts `joinPace`): the coordinator counts those who joined since the report by it. */
  joinsPerSecond?: number;
  /** How late, on average, the shard admitted the shoppers it let in since its last report, after their round's time (absent: none let in). */
  lateMs?: number;
  /** Admitted shoppers whose purchase the shard has heard succeeded (absent from a shard of an earlier build). */
  bought?: number;
};

/** An admission round: every waiting key up to `cursor` is admitted at `at`. */
export type Round = { round: number; cursor: string; at: number };

/** What the coordinator answers a report with. */
export type HubReply = {
  /** Rounds after the shard's `round` (the latest ones; older ones are folded into the first). */
  rounds: Round[];
  /** Waiting keys at or above this one cannot get a unit (null: nobody is sold out yet). */
  line: string | null;
  /** (key, shoppers ahead of it) over the whole line, ascending; exact for the first ones. */
  marks: Ladder;
  /** Shoppers waiting in the whole room (keyed), and in the pre-queue before the draw. */
  waiting: number;
  preQueued: number;
  remaining: number;
  admitPerSecond: number;
  /** Whether the room holds shoppers in line, from `since` on (before it, `!on`). */
  active: { on: boolean; since: number };
  /** The pre-queue seed, once the sale has started. */
  seed?: string;
  seedHash: string;
  /** How often shards report, and how far ahead of its decision a round takes effect. */
  tickMs: number;
  /** The measured wait from a join to its round when nobody is ahead (absent until measured, or from an earlier build). */
  frontLagMs?: number;
  /** How late the shards let shoppers in after their round's time, on average lately (absent: not measured). */
  lateMs?: number;
};

/** The room's totals for the stats route (and the bench's queue phase). */
export type RoomStats = {
  mode: QueueMode;
  active: boolean;
  waiting: number;
  preQueued: number;
  admittedPerSecond: number;
  admitted: number;
  joined: number;
  outstanding: number;
  live: number;
  liveMessages: number;
  round: number;
  /** ETA of the last shopper in line, in seconds. */
  lastEtaSeconds: number;
  /** The room's shard count, and how many of them reported lately. */
  shards: number;
  shardsReporting: number;
  /** What the ETAs take as the room's own delays, as measured lately (null: not yet): a join to its round with nobody ahead, and the shards' lateness after a round's time. */
  frontLagMs: number | null;
  lateMs: number | null;
};
