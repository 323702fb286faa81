import { log } from '../../workers/kernel/log';
import { leaseChunk } from '../../workers/kernel/shards';
import { callWithin } from '../../workers/kernel/within';
import type { goodsStock } from '../routing';
import type { LeaseRow, LeaseStore } from './lease-store';
import type { Sale } from './storage';

// Shard 0's side of a goods' stock shards (leases.ts has the design and the other shards' side):
// the goods' pool hands out grants, takes free units back from the other shards in the endgame
// (give-backs), and sums what every shard holds. Each grant and give-back is credited once, by id.

/**
 * Units granted to a shard whose answer has not reached it yet are counted by neither shard: a
 * dry ask whose sweep found nothing but such units waits this long and sweeps again (the shard
 * gives them back once they land), for at most GATHER_MS in all.
 */
const IN_FLIGHT_WAIT_MS = 25;
const GATHER_MS = 1_500;
/** How long a shard, and shard 0, take a sure "none" for the sell-out (leases.ts). */
export const SOLD_OUT_MEMORY_MS = 1_000;

/**
 * A call to another shard of the goods that has not answered after this long counts as
 * unanswered: its id stays pending for the alarm to ask again (the same id gets the same
 * answer). Without it one call that never answered held its single-flight (a refill, a sweep, a
 * shard's give-backs) and every purchase waiting on it for good.
 */
export const SHARD_CALL_MS = 3_000;

/**
 * A call to shard 0 that may make calls of its own (a grant's sweep, the goods' figure) waits
 * this long, so shard 0's answer that a shard did not answer reaches its asker in time.
 */
export const NESTED_CALL_MS = 2 * SHARD_CALL_MS;

/**
 * Shard 0's answer to a lease ask; `unsure` when a dry ask's sweep could not reach every unit
 * (a shard did not answer, or units were still on their way): its shortfall is not a sell-out.
 */
export type Grant = { units: number; unsure?: true };
/** A shard's answer to shard 0's give-back; `awaiting` is the id of its grant ask still unanswered, if any. */
export type GiveBack = { units: number; remaining: number; awaiting?: string };
/** A shard's ask for a lease, as shard 0 answers it. */
type GrantAsk = { from: number; grantId: string; want: number; need: number; dry: boolean; reported: number };
/**
 * What a sweep (or one give-back) came to: the units credited to shard 0, whether a shard asked
 * had units granted to it still on their way, and whether one did not answer.
 */
export type Sweep = { credited: number; inFlight: boolean; failed: boolean };
/**
 * What asks for stock came to: the units they brought (another batch may have taken them since),
 * and whether they reached every unit (false: a shortfall is not the goods' sell-out).
 */
export type Gathered = { units: number; sure: boolean };

/** What the pool shares with its object's lease logic (leases.ts). */
export type PoolContext = {
  readonly store: LeaseStore;
  readonly storage: DurableObjectStorage;
  /** This shard's place, as last saved. */
  place(): LeaseRow;
  /** The stub of another shard of the goods. */
  stub(sale: Sale, shard: number): ReturnType<typeof goodsStock>;
  sale(): Sale | undefined;
  /** Shard 0's units not wanted by one of its own batches waiting for stock. */
  free(sale: Sale): number;
  /** The shard's stock changed outside a reservation batch: mirror it. */
  stockChanged(remaining: number): void;
  /** Asks for an alarm at `at` (a lost answer is asked again then). */
  retryAt(at: number): void;
  /** Counts calls to other shards (the snapshot's poolCalls). */
  countCall(n: number): void;
};

export class LeasePool {
  private sweeping: Promise<Sweep> | undefined;
  /** The shard the running sweep does not ask (its asker). */
  private sweepExclude = -1;
  private reading: Promise<number> | undefined;
  /** The give-back being asked of each shard. */
  private readonly reclaiming = new Map<number, Promise<Sweep>>();
  /** Units dry asks being answered want (their shards' waiting shoppers). */
  private asked = 0;
  /** Shard 0 had to sweep: the stock left is handed out in shares (in memory: it only saves calls). */
  private endgame = false;
  /** A gather ended on a sure "none": until then dry asks are answered none without a sweep (leases.ts). */
  private soldOutUntil = 0;

  constructor(private readonly c: PoolContext) {}

  /**
   * Shard 0 hands `from` up to `want` units; a background ask leaves shard 0 a lease of its
   * own, a dry one may take its last units and, if those cannot cover `need`, first takes free
   * units back from the other shards. The same grant id gets the same answer.
   */
  async grant(sale: Sale, from: number, grantId: string, want: number, need: number, dry: boolean, reported: number): Promise<Grant> {
    const prior = this.priorGrant(from, grantId);
    if (prior) {
      return prior;
    }
    this.c.store.saveReport(from, reported);
    const ask: GrantAsk = { from, grantId, want, need, dry, reported };
    if (!dry) {
      return this.answer(sale, ask);
    }
    this.asked += need;
    try {
      const { sure } = await this.gather(sale, from, need, reported);
      const granted = this.answer(sale, ask);
      return sure ? granted : { ...granted, unsure: true };
    } finally {
      this.asked -= need;
    }
  }

  /** Shard 0's answer to an ask, once a dry one has gathered what it could. */
  private answer(sale: Sale, { from, grantId, want, need, dry, reported }: GrantAsk): Grant {
    const current = this.c.sale() ?? sale;
    // A background ask leaves shard 0 a lease of its own, and gets nothing in the endgame; a dry
    // ask gets a lease, or in the endgame its need or a fair share of what is left.
    const chunk = leaseChunk(current.totalStock, this.c.place().shards);
    const keep = dry ? 0 : this.endgame ? current.remaining : chunk;
    const share = this.endgame ? Math.max(need, Math.ceil(current.remaining / this.c.place().shards)) : want;
    const granted = this.c.storage.transactionSync((): Grant => {
      const again = this.priorGrant(from, grantId);
      if (again) {
        return again;
      }
      const units = Math.max(0, Math.min(share, current.remaining - keep));
      current.remaining -= units;
      this.c.store.saveRemaining(current.remaining);
      this.c.store.saveGrant(from, grantId, units);
      this.c.store.saveReport(from, reported + units);
      return { units };
    });
    if (granted.units > 0) {
      this.c.stockChanged(current.remaining);
    }
    return granted;
  }

  private priorGrant(from: number, grantId: string): Grant | undefined {
    const last = this.c.store.lastGrant(from);
    return last?.grantId === grantId ? { units: last.units } : undefined;
  }

  /** A shard's stock as it last told shard 0 (after a release there: the next sweep asks it first, and the sell-out is forgotten). */
  report(shard: number, remaining: number): void {
    this.c.store.saveReport(shard, remaining);
    if (remaining > 0) {
      this.soldOutUntil = 0;
    }
  }

  /** A gather ended on a sure "none" less than SOLD_OUT_MEMORY_MS ago, and no shard has reported units since. */
  soldOutKnown(): boolean {
    return Date.now() < this.soldOutUntil;
  }

  /**
   * The goods' free units over every shard, each of the others asked now: what a refusal of
   * several units tells the shopper, so asked only then, at the end of a sale. Shard 0 reads it
   * so that no unit is counted twice: no give-back runs meanwhile (a sweep waits for the read,
   * the read for a running sweep), and the others are read before shard 0's own units (a grant
   * leaves shard 0 before it reaches its shard). Units waiting shoppers want count nowhere:
   * those a shard holds for a batch waiting for stock, those shard 0 gathers for a dry ask, and
   * those granted and still on their way (at the end of a sale they answer a dry ask). A shard
   * that does not answer counts none. Concurrent askers share a read.
   */
  async goodsLeft(sale: Sale): Promise<number> {
    if (this.soldOutKnown()) {
      // The others held nothing free at the last sweep and have reported none since.
      return this.ownLeft(sale);
    }
    while (this.sweeping) {
      await this.sweeping;
    }
    if (this.reading) {
      return this.reading;
    }
    this.reading = this.readGoodsLeft(sale).finally(() => {
      this.reading = undefined;
    });
    return this.reading;
  }

  private async readGoodsLeft(sale: Sale): Promise<number> {
    const others = Array.from({ length: this.c.place().shards - 1 }, (_, i) => i + 1);
    this.c.countCall(others.length);
    const figures = await Promise.all(
      others.map((j) => callWithin(this.c.stub(sale, j).snapshot(), `shard ${j}'s snapshot`, SHARD_CALL_MS).catch(() => undefined)),
    );
    return figures.reduce((n, s) => n + (s?.free ?? s?.remaining ?? 0), this.ownLeft(sale));
  }

  /** Shard 0's own units left to sell: not wanted by its waiting batches nor gathered for a dry ask. */
  private ownLeft(sale: Sale): number {
    return Math.max(0, this.c.free(this.c.sale() ?? sale) - this.asked);
  }

  /** Shard 0's own units plus what the others last reported (an upper bound while they sell). */
  goodsRemaining(sale: Sale): number {
    return sale.remaining + this.c.store.reportedOthers(this.c.place().shards);
  }

  /**
   * Sweeps until shard 0 holds `need` units (a dry ask's, or its own shoppers'): again at once
   * after a sweep that found some (another asker's grant may have taken them), again after a
   * moment while units granted to a shard are still on their way to it or a shard did not
   * answer, for at most GATHER_MS. A sweep that finds nothing, with nothing on its way and every
   * shard answering, ends it, and when neither shard 0 nor the asker (`askerHolds`, the units
   * it reported; the sweep skips it) holds any is remembered as the sell-out for
   * SOLD_OUT_MEMORY_MS: a gather meanwhile sweeps nothing. Not sure when the last sweep could
   * not reach every unit.
   */
  async gather(sale: Sale, exclude: number, need: number, askerHolds = 0): Promise<Gathered> {
    const until = Date.now() + GATHER_MS;
    let sure = true;
    let units = 0;
    while (sale.remaining < need && Date.now() < until) {
      if (this.soldOutKnown()) {
        // Another ask's sweep (this one may have waited for it) just found none.
        sure = true;
        break;
      }
      const swept = await this.sweep(sale, exclude);
      units += swept.credited;
      sure = !swept.inFlight && !swept.failed;
      if (swept.credited > 0) {
        continue;
      }
      if (sure) {
        if (sale.remaining === 0 && askerHolds === 0) {
          // Not when shard 0 or the asker still holds a few, fewer than `need`: they end with the
          // asker, whose batch is refused (or fails) and leaves them free, and a smaller need
          // elsewhere must find them.
          this.soldOutUntil = Date.now() + SOLD_OUT_MEMORY_MS;
        }
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, IN_FLIGHT_WAIT_MS));
    }
    return { units, sure: sure || sale.remaining >= need };
  }

  /**
   * The endgame: takes every free unit back from the other shards (except `exclude`), all at
   * once (those that reported none only if the rest had nothing). From then on shard 0 hands dry
   * shards fair shares of what is left rather than leases, so the last units stay where every
   * shard can reach them. Single-flight: a second caller excluding the same shard shares the
   * running sweep and its answer; one excluding another waits for it and sweeps again.
   */
  async sweep(sale: Sale, exclude: number): Promise<Sweep> {
    for (;;) {
      if (this.reading) {
        await this.reading;
      } else if (!this.sweeping) {
        break;
      } else if (this.sweepExclude === exclude) {
        return this.sweeping;
      } else {
        // The running sweep skips a shard this caller needs asked (its own asker's).
        await this.sweeping;
        if (this.soldOutKnown()) {
          // It asked every shard but this caller's asker, whose ask says it is dry, and found none.
          return { credited: 0, inFlight: false, failed: false };
        }
      }
    }
    this.endgame = true;
    this.sweepExclude = exclude;
    this.sweeping = (async (): Promise<Sweep> => {
      // The excluded shard (the asker) too when a give-back of its is still uncredited (its answer
      // lost): asked again with the same id, it hands over the same units and no more.
      const pending = new Set(this.c.store.pendingReclaims());
      const others = Array.from({ length: this.c.place().shards - 1 }, (_, i) => i + 1).filter((j) => j !== exclude || pending.has(j));
      const reported = this.c.store.reports();
      const swept: Sweep = { credited: 0, inFlight: false, failed: false };
      const ask = async (shards: number[]) => {
        const replies = await Promise.all(shards.map((j) => this.reclaimFrom(sale, j, j === exclude)));
        for (const r of replies) {
          swept.credited += r.credited;
          swept.inFlight ||= r.inFlight;
          swept.failed ||= r.failed;
        }
      };
      // A shard that last reported nothing is asked only when the others had nothing either: its
      // figure is a hint (a release's report may be lost), not a fact.
      await ask(others.filter((j) => reported.get(j) !== 0));
      if (swept.credited === 0) {
        await ask(others.filter((j) => reported.get(j) === 0));
      }
      return swept;
    })().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  /**
   * One give-back from shard `j` of every free unit it holds, credited once; an unanswered one
   * stays pending for the alarm. The units credited, whether units granted to `j` are still on
   * their way to it (its grant ask unanswered, and shard 0 has answered it with units), and
   * whether `j` did not answer. `replay` asks a pending one again with its id and nothing more
   * to give (an unanswered ask may never have arrived), and none at all once it is answered.
   * Give-backs from one shard go one at a time: a replay sharing an id with a sweep's ask could
   * arrive first and make the sweep's answer none while the shard holds units.
   */
  async reclaimFrom(sale: Sale, j: number, replay = false): Promise<Sweep> {
    for (let prior = this.reclaiming.get(j); prior; prior = this.reclaiming.get(j)) {
      await prior.catch(() => undefined);
    }
    const pending = this.c.store.pendingReclaim(j);
    if (replay && !pending) {
      return { credited: 0, inFlight: false, failed: false };
    }
    const run = this.askGiveBack(sale, j, replay ? 0 : sale.totalStock, pending).finally(() => {
      this.reclaiming.delete(j);
    });
    this.reclaiming.set(j, run);
    return run;
  }

  /**
   * A give-back asked with a pending id is answered as it was the first time (the shard
   * remembers its last one), which told the shard's stock as it was then. When the shard holds
   * units now and more were asked for than a replay's none, it is asked again with a new id.
   */
  private async askGiveBack(sale: Sale, j: number, max: number, pending: string | undefined): Promise<Sweep> {
    const first = await this.askGiveBackOnce(sale, j, max, pending);
    if (pending === undefined || max <= 0 || first.failed || first.holds <= 0) {
      return first;
    }
    const again = await this.askGiveBackOnce(sale, j, max, undefined);
    return { credited: first.credited + again.credited, inFlight: first.inFlight || again.inFlight, failed: again.failed };
  }

  /** One give-back asked of shard `j`, and what the shard holds after it (0 when it did not answer). */
  private async askGiveBackOnce(sale: Sale, j: number, max: number, pending: string | undefined): Promise<Sweep & { holds: number }> {
    let id = pending;
    if (!id) {
      id = crypto.randomUUID();
      this.c.store.savePendingReclaim(j, id);
    }
    const reclaimId = id;
    this.c.countCall(1);
    let reply: GiveBack;
    try {
      reply = await callWithin(this.c.stub(sale, j).giveBack(sale.goodsId, reclaimId, max), `shard ${j}'s give-back`, SHARD_CALL_MS);
    } catch (error) {
      log.warn('goods_stock.give_back_failed', { goodsId: sale.goodsId, shard: j, error });
      this.c.retryAt(Date.now() + 1_000);
      return { credited: 0, inFlight: false, failed: true, holds: 0 };
    }
    const granted = reply.awaiting === undefined ? undefined : this.c.store.lastGrant(j);
    const inFlight = granted !== undefined && granted.grantId === reply.awaiting && granted.units > 0;
    const current = this.c.sale() ?? sale;
    const credited = this.c.storage.transactionSync(() => {
      if (this.c.store.pendingReclaim(j) !== reclaimId) {
        return 0;
      }
      this.c.store.clearReclaim(j);
      current.remaining += reply.units;
      this.c.store.saveRemaining(current.remaining);
      this.c.store.saveReport(j, reply.remaining);
      return reply.units;
    });
    if (credited > 0) {
      this.c.stockChanged(current.remaining);
    }
    return { credited, inFlight, failed: false, holds: reply.remaining };
  }
}
