import { z } from 'zod';
import { log } from '../../workers/kernel/log';
import { sumSnapshots } from '../../workers/kernel/shards';
import { type HubReply, ROOM_SHARDS, type RoomGoods, type RoomStats, type ShardReport } from '../../workers/kernel/waiting-room';
import { callWithin } from '../../workers/kernel/within';
import { goodsStock } from '../routing';
import { decide, type HubState, type HubView, initialHubState, type Reported, roundsAfter, type Stock } from './hub-rules';
import { lateness } from './measures';
import { newSeed, seedHashOf } from './rules';
import { TICK_MS } from './standing';
import type { RoomStorage } from './storage';

const Seed = z.object({ seed: z.string(), seedHash: z.string() });
type Seed = z.infer<typeof Seed>;

const StoredHub = z.object({
  round: z.number(),
  cursor: z.string(),
  rounds: z.array(z.object({ round: z.number(), cursor: z.string(), at: z.number() })),
  tokens: z.number(),
  decidedAt: z.number(),
  active: z.object({ on: z.boolean(), since: z.number() }),
  quietSince: z.number().nullable(),
  arrivals: z.array(z.object({ at: z.number(), n: z.number() })),
  admittedSamples: z.array(z.object({ at: z.number(), n: z.number() })),
  confirmedSamples: z.array(z.object({ at: z.number(), n: z.number() })).default([]),
  lastLine: z.string().nullable().default(null),
  frontLagMs: z.number().nullable().default(null),
  lateMs: z.number().nullable().default(null),
  drained: z.boolean().default(true),
  bought: z.record(z.string(), z.number()).default({}),
});

const StoredView = z.object({
  line: z.string().nullable(),
  marks: z.object({ keys: z.array(z.string()), counts: z.array(z.number()) }),
  waiting: z.number(),
  preQueued: z.number(),
  remaining: z.number(),
  outstanding: z.number(),
  admittedPerSecond: z.number(),
  lastEtaSeconds: z.number(),
  frontLagMs: z.number().optional(),
});

/** A decision is due when a tick has passed since the last one (a little early is fine). */
const DECIDE_SLACK_MS = 100;
/**
 * How long a decision waits for a stock object's figures: a read that never answers would hold
 * this decision and, through `deciding`, every one after it; given up, the decision admits by the
 * rate alone (as when the object does not answer), within the shards' wait for their reports.
 */
const STOCK_DEADLINE_MS = 1_500;

/**
 * The coordinator of one goods' waiting room. Only the room's shards call it, each about once a
 * tick; it keeps their latest reports, decides the admission rounds from them (hub-rules.ts),
 * and holds the pre-queue seed: made before anyone can join, its hash public at once, the seed
 * itself told to the shards only once the sale has started.
 */
export class RoomHub {
  private state: HubState | undefined;
  private view: HubView | undefined;
  private goods: RoomGoods | undefined;
  private readonly reports = new Map<number, Reported>();
  private arrivals = 0;
  private deciding = false;
  private seed: Seed | undefined;
  /** A coordinator that (re)started decides only after a tick of reports: it must hear every busy shard first. */
  private readonly bootAt = Date.now();

  constructor(
    private readonly env: Env,
    private readonly store: RoomStorage,
  ) {
    this.state = store.state('hub', (raw) => StoredHub.parse(raw));
    this.view = store.state('view', (raw) => StoredView.parse(raw));
    this.seed = store.state('seed', (raw) => Seed.parse(raw));
  }

  /** The seed, made on first use. */
  private async ensureSeed(): Promise<Seed> {
    if (!this.seed) {
      const seed = newSeed();
      const made = { seed, seedHash: await seedHashOf(seed) };
      // Another call may have made one while this one hashed: the first stays.
      if (!this.seed) {
        this.seed = made;
        this.store.saveState('seed', made);
      }
    }
    return this.seed ?? { seed: '', seedHash: '' };
  }

  /** The commitment, and the seed once the sale has started. */
  async seedInfo(goods: RoomGoods): Promise<{ seedHash: string; seed?: string }> {
    const { seed, seedHash } = await this.ensureSeed();
    return Date.now() >= goods.startAt ? { seedHash, seed } : { seedHash };
  }

  async report(r: ShardReport): Promise<HubReply> {
    const seed = await this.ensureSeed();
    this.goods = r.goods;
    this.reports.set(r.shard, { ...r, receivedAt: Date.now() });
    this.arrivals += r.arrivals;
    const before = this.state ?? initialHubState(r.goods, Date.now());
    const state = r.lateMs === undefined ? before : { ...before, lateMs: lateness(before.lateMs, r.lateMs, TICK_MS) };
    this.state = state;
    const now0 = Date.now();
    const warm = this.state.decidedAt === 0 || now0 - this.bootAt >= TICK_MS + DECIDE_SLACK_MS;
    if (!this.deciding && warm && now0 - state.decidedAt >= TICK_MS - DECIDE_SLACK_MS) {
      await this.decideNow(r.goods);
    }
    const now = Date.now();
    const current = this.state ?? state;
    const view = this.view;
    return {
      rounds: roundsAfter(current, r.round),
      line: view?.line ?? null,
      marks: view?.marks ?? { keys: [], counts: [] },
      waiting: view?.waiting ?? 0,
      preQueued: view?.preQueued ?? 0,
      remaining: view?.remaining ?? 0,
      admitPerSecond: r.goods.admitPerSecond,
      active: current.active,
      ...(now >= r.goods.startAt ? { seed: seed.seed } : {}),
      seedHash: seed.seedHash,
      tickMs: TICK_MS,
      ...(view?.frontLagMs === undefined ? {} : { frontLagMs: view.frontLagMs }),
      ...(current.lateMs === null ? {} : { lateMs: current.lateMs }),
    };
  }

  private async decideNow(goods: RoomGoods): Promise<void> {
    this.deciding = true;
    try {
      const stock = await this.readStock(goods);
      const now = Date.now();
      const arrivals = this.arrivals;
      const { state, view } = decide(
        this.state ?? initialHubState(goods, now),
        [...this.reports.values()],
        goods,
        stock,
        arrivals,
        now,
        TICK_MS,
      );
      this.arrivals -= arrivals;
      this.state = state;
      this.view = view;
      this.store.saveState('hub', state);
      this.store.saveState('view', view);
    } finally {
      this.deciding = false;
    }
  }

  /**
   * Units not held, reservations still waiting for Postgres, and confirmed orders, from the
   * goods' stock object: one call a stock shard a tick. Unknown (no object yet, or shard 0 did
   * not answer) admits by the rate alone and tells nobody sold out. A sharded goods' units not
   * held are shard 0's figure (it knows the pool and what the others last reported: an upper
   * bound while they sell); its reservations and orders are every shard's own, read side by
   * side, so the confirmed count is the goods' own (`exact`, which the admissions' count of
   * purchases heard late needs), and so are the counts of those made by shoppers the room let
   * in. A shard that does not answer leaves shard 0's figures scaled up (shoppers spread evenly
   * over the shards by the hash of their id), not exact. Each read waits at most STOCK_DEADLINE_MS:
   * a decision waits on it, and every shard's report on the decision.
   */
  private async readStock(goods: RoomGoods): Promise<Stock | undefined> {
    const placement = { id: goods.goodsId, locationHint: goods.locationHint };
    try {
      const snapshot = await callWithin(goodsStock(this.env, placement).snapshot(), 'the stock object', STOCK_DEADLINE_MS);
      if (!snapshot) {
        return undefined;
      }
      const remaining = snapshot.goodsRemaining ?? snapshot.remaining;
      const n = snapshot.shards ?? 1;
      const others = await Promise.all(
        Array.from({ length: n - 1 }, (_, i) =>
          callWithin(goodsStock(this.env, placement, i + 1).snapshot(), `stock shard ${i + 1}`, STOCK_DEADLINE_MS).catch(() => undefined),
        ),
      );
      const read = others.filter((o) => o !== undefined && o !== null);
      if (read.length === others.length) {
        // Summed as the stats sum them (the room's own counts only when every shard keeps them).
        const { queued, confirmed, admittedQueued, admittedConfirmed } = sumSnapshots([snapshot, ...read]) ?? snapshot;
        const admitted = admittedQueued !== undefined && admittedConfirmed !== undefined ? { admittedQueued, admittedConfirmed } : {};
        return { remaining, queued, confirmed, exact: true, ...admitted };
      }
      return { remaining, queued: snapshot.queued * n, confirmed: snapshot.confirmed * n, exact: false };
    } catch (error) {
      log.warn('room.stock_unavailable', { goodsId: goods.goodsId, error });
      return undefined;
    }
  }

  /** The room's totals, from the shards' latest reports and the last decision. */
  stats(goods: RoomGoods): RoomStats {
    const now = Date.now();
    const reports = [...this.reports.values()];
    const sum = (f: (r: Reported) => number) => reports.reduce((s, r) => s + f(r), 0);
    const active = this.state ? this.state.active : { on: goods.mode === 'always', since: 0 };
    return {
      mode: goods.mode,
      active: now >= active.since ? active.on : !active.on,
      waiting: this.view?.waiting ?? 0,
      preQueued: this.view?.preQueued ?? 0,
      admittedPerSecond: this.view?.admittedPerSecond ?? 0,
      admitted: sum((r) => r.admitted),
      joined: sum((r) => r.joined),
      outstanding: this.view?.outstanding ?? 0,
      live: sum((r) => r.live),
      liveMessages: sum((r) => r.messages),
      round: this.state?.round ?? 0,
      lastEtaSeconds: this.view?.lastEtaSeconds ?? 0,
      shards: goods.shards ?? ROOM_SHARDS,
      shardsReporting: reports.filter((r) => now - r.receivedAt < TICK_MS * 5).length,
      frontLagMs: this.state?.frontLagMs ?? null,
      lateMs: this.state?.lateMs ?? null,
    };
  }
}
