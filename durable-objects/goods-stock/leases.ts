import type { StockSnapshot } from '../../workers/kernel/contract';
import { log } from '../../workers/kernel/log';
import { leaseChunk } from '../../workers/kernel/shards';
import { callWithin } from '../../workers/kernel/within';
import { goodsStock } from '../routing';
import { type Gathered, type GiveBack, type Grant, LeasePool, NESTED_CALL_MS, SHARD_CALL_MS, SOLD_OUT_MEMORY_MS } from './lease-pool';
import { type LeaseRow, LeaseStore } from './lease-store';
import type { Sale } from './storage';

export type { GiveBack, Grant };

// Stock shards of a hot goods, as every shard sees them (shard 0's side, the pool's grants,
// give-backs and sums, is lease-pool.ts). Shard 0 (the object a one-shard goods has always had)
// holds the goods' pool: its own `remaining` is the pool, sold from by its own shoppers and
// leased to the other shards. Every other shard starts empty and asks shard 0 for a lease
// (leaseChunk units) at init and again in the background when it runs low, so a shopper never
// waits on shard 0 unless their shard is dry. A dry shard asks with `dry` set: when the pool cannot cover the
// batch, shard 0 takes every unsold free unit back from the other shards (give-backs) before
// the shard answers SOLD_OUT, and from then on hands out shares of what is left. Released units
// go back to the shard that held the reservation; a give-back moves them to whoever can sell them.
//
// Units move between objects exactly once. The receiver of a grant records its id before it
// asks and credits the units only while that id is still pending; shard 0 remembers the last
// grant per shard, so asking again with the same id gets the same answer. Give-backs are the
// same the other way round: shard 0 records the id, the giving shard remembers its last one.
// An ask whose answer was lost is repeated (the next ask or the alarm), so no unit is lost or
// counted twice; the repeat's answer is the stock as it was then, so a search for units goes
// on after it with a new id.
//
// After the sell-out every shopper who reaches a shard is refused, and each refusal would ask
// shard 0, which would sweep every shard: a call per shard per refusal, on the objects the
// flood is spread over to spare. So both sides remember a sure "none" (every shard answered,
// nothing on its way, shard 0 and the asker empty too) for SOLD_OUT_MEMORY_MS: a dry shard
// refuses on it without asking, shard 0 answers dry asks on it without sweeping. A unit
// released on another shard is sold by that shard's shoppers at once and reaches the others'
// once the memory runs out (its report to shard 0 ends shard 0's memory at once), as the
// edge's own sell-out memory already has it.

/** A background refill starts when a shard holds this fraction of a lease or less. */
const LOW_WATER = 0.5;
/** After a refill or sweep found nothing, the pool is not asked again in the background for this long. */
const EMPTY_BACKOFF_MS = 2_000;

/** What the lease logic needs of its object beyond its state: its sale, and what to do when stock moved. */
export type LeaseHost = {
  sale(): Sale | undefined;
  /** The shard's stock changed outside a reservation batch: mirror it. */
  stockChanged(remaining: number): void;
  /** Asks for an alarm at `at` (a lost answer is asked again then). */
  retryAt(at: number): void;
};

export class Leases {
  private row: LeaseRow = { shard: 0, shards: 1, location_hint: null, pending_grant: null, given_id: null, given_units: 0 };
  private refilling: Promise<Gathered> | undefined;
  /** Units this shard's batches waiting for stock want (cover). */
  private wanted = 0;
  private emptyUntil = 0;
  /** Shard 0 answered a dry ask with a sure "none": this shard's short batches are refused until then without asking. */
  private soldOutUntil = 0;
  /** Calls between shards this instance made: grants asked of shard 0, or (shard 0) give-backs asked of the others. */
  poolCalls = 0;
  private readonly store: LeaseStore;
  /** Shard 0's side: grants, give-backs asked of the others, the goods' figure (lease-pool.ts). */
  readonly pool: LeasePool;

  private readonly host: LeaseHost & { storage: DurableObjectStorage; env: Env; waitUntil(p: Promise<unknown>): void };

  constructor(ctx: DurableObjectState, env: Env, host: LeaseHost) {
    this.store = new LeaseStore(ctx.storage.sql);
    this.host = { ...host, storage: ctx.storage, env, waitUntil: (p) => ctx.waitUntil(p) };
    this.pool = new LeasePool({
      store: this.store,
      storage: ctx.storage,
      place: () => this.row,
      stub: (sale, shard) => this.stub(sale, shard),
      sale: () => host.sale(),
      free: (sale) => this.free(sale),
      stockChanged: (remaining) => host.stockChanged(remaining),
      retryAt: (at) => host.retryAt(at),
      countCall: (n) => {
        this.poolCalls += n;
      },
    });
  }

  /** Reads this shard's place; call while the object loads. */
  load(): void {
    this.row = this.store.row() ?? this.row;
  }

  get shard(): number {
    return this.row.shard;
  }

  get shards(): number {
    return this.row.shards;
  }

  /** Work left from a lost answer (a grant not credited, a give-back not credited). */
  get pending(): boolean {
    return this.row.pending_grant !== null || this.store.pendingReclaims().length > 0;
  }

  private save(): void {
    this.store.saveRow(this.row);
  }

  private stub(sale: Sale, shard: number) {
    return goodsStock(this.host.env, { id: sale.goodsId, locationHint: this.row.location_hint }, shard);
  }

  private saveRemaining(sale: Sale): void {
    this.store.saveRemaining(sale.remaining);
  }

  /**
   * Takes this object's place at init. Shard 0 whose shard count changes takes back every free
   * unit of the shards it had (before a sale starts that is all of theirs), so the new shards
   * lease from a full pool. Another shard takes its first lease.
   */
  async configure(shard: number, shards: number, locationHint: string | null | undefined, lease: boolean): Promise<void> {
    const before = this.row.shards;
    const first = this.store.row() === undefined;
    if (first || before !== shards || this.row.shard !== shard || (locationHint ?? null) !== this.row.location_hint) {
      this.row = { ...this.row, shard, shards, location_hint: locationHint ?? null };
      this.save();
    }
    const sale = this.host.sale();
    if (!sale) {
      return;
    }
    if (shard === 0 && !first && before > 1 && before !== shards) {
      log.warn('goods_stock.reshard', { goodsId: sale.goodsId, from: before, to: shards });
      for (let j = 1; j < before; j++) {
        await this.pool.reclaimFrom(sale, j);
      }
    }
    if (lease && shard > 0 && shards > 1 && sale.remaining < leaseChunk(sale.totalStock, shards)) {
      await this.refill(0, false).catch((error: unknown) => log.warn('goods_stock.lease_failed', { goodsId: sale.goodsId, shard, error }));
    }
  }

  /** True when this shard of a sharded goods cannot cover `need` units from what it holds. */
  short(need: number): boolean {
    const sale = this.host.sale();
    return sale !== undefined && this.row.shards > 1 && sale.remaining < need;
  }

  /**
   * A batch this shard cannot cover asks for stock until it can or none comes, three asks at
   * most and none begun after SHARD_CALL_MS (its shoppers wait; `on` says the sale still is),
   * then runs `commit`, its transaction, with no await after the last check: units that came
   * may have gone to another of this shard's batches on the way back (batches share an ask),
   * and the loop then asks again. Meanwhile its units are wanted: the goods' figure a refusal
   * gives leaves them out (`free`). `commit` is told whether a shortfall is the goods'
   * sell-out: not when the last ask could not reach every unit (a shard did not answer, or
   * units were still on their way); the shoppers it leaves out then retry, not SOLD_OUT. Asks
   * never throw.
   */
  async cover<T>(units: number, on: () => boolean, commit: (soldOutKnown: boolean) => T): Promise<T> {
    if (this.soldOutKnown()) {
      return commit(true);
    }
    this.wanted += units;
    let known = true;
    const started = Date.now();
    try {
      // No new ask once SHARD_CALL_MS has gone by: an ask that met a shard not answering took that long.
      for (let round = 0; round < 3 && on() && this.short(units) && (round === 0 || Date.now() - started < SHARD_CALL_MS); round++) {
        const filled = await this.fill(units);
        known = filled.sure;
        if (filled.units === 0 && filled.sure) {
          break;
        }
      }
    } finally {
      this.wanted -= units;
    }
    return commit(known);
  }

  /** This shard (or shard 0) heard a sure "none" less than SOLD_OUT_MEMORY_MS ago. */
  private soldOutKnown(): boolean {
    return this.row.shard === 0 ? this.pool.soldOutKnown() : Date.now() < this.soldOutUntil;
  }

  /** This shard's units not wanted by one of its batches waiting for stock. */
  free(sale: Sale): number {
    return Math.max(0, sale.remaining - this.wanted);
  }

  /** Asks for stock once (shard 0 sweeps the other shards). */
  private async fill(need: number): Promise<Gathered> {
    const sale = this.host.sale();
    if (!sale) {
      return { units: 0, sure: true };
    }
    try {
      return this.row.shard === 0 ? await this.pool.gather(sale, 0, need) : await this.refill(need, true);
    } catch (error) {
      log.warn('goods_stock.dry_refill_failed', { goodsId: sale.goodsId, shard: this.row.shard, error });
      return { units: 0, sure: false };
    }
  }

  /** After a batch: a shard running low refills in the background, off the shoppers' path. */
  afterBatch(now: number): void {
    const sale = this.host.sale();
    if (!sale || this.row.shards <= 1 || this.row.shard === 0 || this.refilling || now < this.emptyUntil) {
      return;
    }
    if (sale.remaining <= Math.floor(leaseChunk(sale.totalStock, this.row.shards) * LOW_WATER)) {
      this.host.waitUntil(
        this.refill(0, false).catch((error: unknown) => log.warn('goods_stock.refill_failed', { goodsId: sale.goodsId, error })),
      );
    }
  }

  /**
   * Asks shard 0 for a lease (single-flight: a second asker shares the first ask, then asks
   * again if still short).
   */
  private async refill(need: number, dry: boolean): Promise<Gathered> {
    while (this.refilling) {
      const shared = await this.refilling;
      const sale = this.host.sale();
      if (!sale || sale.remaining >= Math.max(1, need)) {
        return shared;
      }
    }
    this.refilling = this.askGrant(need, dry).finally(() => {
      this.refilling = undefined;
    });
    return this.refilling;
  }

  private async askGrant(need: number, dry: boolean): Promise<Gathered> {
    const sale = this.host.sale();
    if (!sale) {
      return { units: 0, sure: true };
    }
    let grantId = this.row.pending_grant;
    // An id asked before whose answer was lost gets that answer again, which told the stock as
    // it was then: a replayed "none" is no sell-out now, so it is not sure and the caller asks
    // again, with a new id (units released since may be on another shard).
    const replay = grantId !== null;
    if (!grantId) {
      grantId = crypto.randomUUID();
      this.row.pending_grant = grantId;
      this.save();
    }
    const want = Math.max(leaseChunk(sale.totalStock, this.row.shards), need);
    this.poolCalls++;
    let grant: Grant;
    try {
      grant = await callWithin(
        this.stub(sale, 0).grant(sale.goodsId, this.row.shard, grantId, want, need, dry, sale.remaining),
        "shard 0's grant",
        NESTED_CALL_MS,
      );
    } catch (error) {
      this.host.retryAt(Date.now() + 1_000);
      throw error;
    }
    const now = this.host.sale();
    const gathered = { units: grant.units, sure: grant.unsure !== true && !replay };
    if (!now || this.row.pending_grant !== grantId) {
      // Credited by an ask with the same id that was answered first (the alarm's).
      return gathered;
    }
    this.host.storage.transactionSync(() => {
      now.remaining += grant.units;
      this.saveRemaining(now);
      this.row.pending_grant = null;
      this.save();
    });
    if (grant.units === 0) {
      this.emptyUntil = Date.now() + EMPTY_BACKOFF_MS;
      if (dry && gathered.sure) {
        this.soldOutUntil = Date.now() + SOLD_OUT_MEMORY_MS;
      }
    } else {
      this.soldOutUntil = 0;
      this.host.stockChanged(now.remaining);
    }
    return gathered;
  }

  /** A snapshot as a shard of a sharded goods tells it: its place, its pool calls, and (shard 0) the goods' figure. */
  decorate(snapshot: StockSnapshot, sale: Sale): StockSnapshot {
    if (this.row.shards <= 1) {
      return snapshot;
    }
    const pool = this.row.shard === 0 ? { goodsRemaining: this.pool.goodsRemaining(sale) } : {};
    const wanted = this.wanted > 0 ? { free: this.free(sale) } : {};
    return { ...snapshot, shard: this.row.shard, shards: this.row.shards, poolCalls: this.poolCalls, ...pool, ...wanted };
  }

  /**
   * The goods' free units over every shard, as shard 0 reads them (lease-pool.ts): what a
   * refusal of several units tells the shopper. This shard's own when shard 0 does not answer.
   */
  async goodsLeft(sale: Sale): Promise<number> {
    if (this.row.shard === 0) {
      return this.pool.goodsLeft(sale);
    }
    if (this.soldOutKnown()) {
      // The others held nothing free when shard 0 last swept them.
      return this.free(sale);
    }
    this.poolCalls++;
    return callWithin(this.stub(sale, 0).goodsLeft(sale.goodsId), "shard 0's goods left", NESTED_CALL_MS).catch((error: unknown) => {
      log.warn('goods_stock.goods_left_failed', { goodsId: sale.goodsId, error });
      return this.host.sale()?.remaining ?? 0;
    });
  }

  // Every shard but 0.

  /** Gives shard 0 up to `max` free units (the same give-back id gets the same answer). */
  giveBack(reclaimId: string, max: number): GiveBack {
    const sale = this.host.sale();
    if (!sale) {
      return { units: 0, remaining: 0 };
    }
    // A grant ask still unanswered: shard 0 may have answered it with units not yet here.
    const awaiting = this.row.pending_grant === null ? {} : { awaiting: this.row.pending_grant };
    if (this.row.given_id === reclaimId) {
      return { units: this.row.given_units, remaining: sale.remaining, ...awaiting };
    }
    const units = this.host.storage.transactionSync(() => {
      const n = Math.max(0, Math.min(max, sale.remaining));
      sale.remaining -= n;
      this.saveRemaining(sale);
      this.row.given_id = reclaimId;
      this.row.given_units = n;
      this.save();
      return n;
    });
    if (units > 0) {
      this.host.stockChanged(sale.remaining);
    }
    return { units, remaining: sale.remaining, ...awaiting };
  }

  /**
   * After a release in a shard other than 0: tells shard 0, so a dry shard's sweep finds the
   * unit and shard 0 forgets a sell-out. Never throws; a lost report leaves the unit to the
   * next sweep once shard 0's memory of the sell-out runs out.
   */
  async noteReleased(): Promise<void> {
    const sale = this.host.sale();
    if (!sale || this.row.shards <= 1 || this.row.shard === 0) {
      return;
    }
    await callWithin(this.stub(sale, 0).report(this.row.shard, sale.remaining), "shard 0's report", SHARD_CALL_MS).catch((error: unknown) =>
      log.warn('goods_stock.report_failed', { goodsId: sale.goodsId, error }),
    );
  }

  /** The alarm: asks again whatever lost its answer. */
  async retryPending(): Promise<void> {
    const sale = this.host.sale();
    if (!sale) {
      return;
    }
    if (this.row.pending_grant !== null) {
      await this.refill(0, false).catch(() => undefined);
    }
    for (const shard of this.store.pendingReclaims()) {
      await this.pool.reclaimFrom(sale, shard, true);
    }
  }
}
