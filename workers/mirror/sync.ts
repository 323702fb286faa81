import { backoffSeconds } from '../kernel/backoff';
import { log } from '../kernel/log';
import { MirrorSkipped, type MirrorView, mirrorRetryAt, OPERATOR_READ, type RedisConfig, readMirrorView, writeMirror } from './client';
import { compareMirror, type MirrorDiscrepancy, type MirrorExpectation } from './compare';
import { deltaOps, emptyDelta, fullOps, isEmptyDelta, type MirrorFullState, type MirrorGoods, type MirrorResult } from './plan';

/** The mirror's bookkeeping, which the goods' object keeps in its storage. */
export type MirrorBookkeeping = { title: string; staleSince: number | null };

/** What the goods' object lets its mirror read, synchronously, from committed storage. */
export type MirrorHost = {
  goodsId(): number | undefined;
  fullState(): MirrorFullState | undefined;
  expectation(): MirrorExpectation | undefined;
  /** The object's stock shard when its goods has several (it writes its part of the stock). */
  stockPart?(): string | undefined;
  /** Asks for an alarm at `at`, to retry a failed write. */
  retryAt(at: number): void;
  /** Stores the bookkeeping durably (the object's storage owns the table). */
  persist(state: MirrorBookkeeping): void;
};

export type MirrorCheck =
  | {
      ok: true;
      /** The object knew the mirror was behind (a failed or lost write) since this time. */
      staleSince: number | null;
      /** The pending write made before comparing: none, the changes of a live sale, or a full rewrite (earlier writes had failed or were lost). */
      flushed: 'none' | 'delta' | 'rewrite';
      view: MirrorView;
      discrepancies: MirrorDiscrepancy[];
      repaired: boolean;
    }
  | { ok: false; reason: 'MIRROR_OFF' | 'NOT_INITIALIZED' | 'UNREACHABLE' | 'BUSY'; staleSince: number | null };

/** The longest wait between two tries of a failed mirror write: 1 s doubling (backoffSeconds), then every minute, for as long as Redis is down. */
export const MIRROR_RETRY_CAP_SECONDS = 60;
const CHECK_ATTEMPTS = 3;

/**
 * Keeps the Redis mirror of one goods' object up to date, off the purchase path.
 *
 * Changes are collected in memory and written as one pipeline per flush; flushes are
 * single-flight, so a burst of reservations costs a few pipelines, not one each. The
 * object's storage holds a "stale since" mark from the first change until a write lands: if
 * a write fails, or the object restarts with changes unwritten, the next flush (or the alarm
 * retrying with backoff) rewrites everything from the object's state instead of a delta.
 * Values are absolute, so a write repeated or replayed leaves the same mirror.
 */
export class MirrorSync {
  private delta = emptyDelta();
  private needsFull = false;
  private staleSince: number | null = null;
  private storedTitle = '';
  private flushing: Promise<boolean> | undefined;
  private flushAgain = false;
  private forceNext = false;
  /** Bumped on every change, so a check can tell whether the object moved while it read. */
  private version = 0;
  private failures = 0;
  private nextRetry: number | null = null;
  private config: RedisConfig | undefined | null = null;

  constructor(
    private readonly redisConfig: () => RedisConfig | undefined,
    private readonly host: MirrorHost,
  ) {}

  /** Takes the bookkeeping the object stored; call while the object loads. */
  load(state: MirrorBookkeeping): void {
    this.storedTitle = state.title;
    this.staleSince = state.staleSince;
    // Changes noted by a previous instance were in its memory only: rewrite everything.
    this.needsFull = this.staleSince !== null;
  }

  private redis(): RedisConfig | undefined {
    if (this.config === null) {
      try {
        this.config = this.redisConfig();
      } catch (error) {
        log.error('mirror.config_failed', { error });
        this.config = undefined;
      }
    }
    return this.config;
  }

  get enabled(): boolean {
    return this.redis() !== undefined;
  }

  /** The goods' title, kept here because only the mirror's goods hash needs it. */
  get title(): string {
    return this.storedTitle;
  }

  setTitle(title: string): void {
    if (title !== this.storedTitle) {
      this.storedTitle = title;
      this.persist();
    }
  }

  /** When the mirror fell behind the object, or null when it is up to date. */
  get staleSinceMs(): number | null {
    return this.staleSince;
  }

  /** When the alarm should retry a failed write, or null. */
  get retryAtMs(): number | null {
    return this.staleSince === null ? null : this.nextRetry;
  }

  private persist(): void {
    this.host.persist({ title: this.storedTitle, staleSince: this.staleSince });
  }

  private changed(): void {
    this.version++;
    if (this.staleSince === null) {
      this.staleSince = Date.now();
      this.persist();
    }
  }

  /** Collects a change, unless a full rewrite is due anyway (it reads the state itself). */
  private apply(change: () => void): void {
    if (!this.enabled) {
      return;
    }
    if (!this.needsFull) {
      change();
    }
    this.changed();
  }

  noteGoods(goods: MirrorGoods): void {
    this.apply(() => {
      this.delta.goods = goods;
    });
  }

  noteStock(remaining: number): void {
    this.apply(() => {
      this.delta.stock = remaining;
    });
  }

  noteUser(userId: string, member: boolean): void {
    this.apply(() => {
      this.delta.users.set(userId, member);
    });
  }

  noteResult(result: MirrorResult): void {
    this.apply(() => {
      this.delta.results.set(result.requestId, result);
    });
  }

  /** The next flush rewrites everything (a new sale, or a mirror known to be wrong). */
  noteFull(): void {
    if (this.enabled) {
      this.needsFull = true;
      this.changed();
    }
  }

  /**
   * Writes what changed. Single-flight: callers during a flush share it and their changes
   * go in the next round. Resolves true when the mirror is up to date. Never throws.
   */
  flush(force = false): Promise<boolean> {
    this.forceNext ||= force;
    if (this.flushing) {
      this.flushAgain = true;
      return this.flushing;
    }
    this.flushing = (async () => {
      let ok = true;
      try {
        do {
          this.flushAgain = false;
          ok = await this.writeOnce();
        } while (ok && (this.flushAgain || this.needsFull || !isEmptyDelta(this.delta)));
        if (ok && this.staleSince !== null && !this.needsFull && isEmptyDelta(this.delta)) {
          this.staleSince = null;
          this.nextRetry = null;
          this.persist();
        }
        return ok;
      } finally {
        this.flushing = undefined;
      }
    })();
    return this.flushing;
  }

  private async writeOnce(): Promise<boolean> {
    const config = this.redis();
    if (!config) {
      return true;
    }
    const force = this.forceNext;
    this.forceNext = false;
    const closedUntil = mirrorRetryAt(config);
    if (!force && closedUntil > 0) {
      // Redis failed moments ago: keep what is pending and let the alarm retry.
      this.nextRetry = closedUntil;
      this.host.retryAt(closedUntil);
      return false;
    }
    let ops: ReturnType<typeof fullOps>;
    let full = false;
    if (this.needsFull) {
      const state = this.host.fullState();
      // Everything collected so far is part of the state just read.
      this.delta = emptyDelta();
      this.needsFull = false;
      if (!state) {
        return true;
      }
      ops = fullOps(state);
      full = true;
    } else {
      if (isEmptyDelta(this.delta)) {
        return true;
      }
      const goodsId = this.host.goodsId();
      const delta = this.delta;
      this.delta = emptyDelta();
      if (goodsId === undefined) {
        return true;
      }
      ops = deltaOps(goodsId, delta, this.host.stockPart?.());
    }
    try {
      await writeMirror(config, ops, { force: force || full });
      this.failures = 0;
      return true;
    } catch (error) {
      // The delta taken is gone with this attempt: only a full rewrite can catch up now.
      this.needsFull = true;
      this.failures++;
      const backoff = backoffSeconds(this.failures, MIRROR_RETRY_CAP_SECONDS) * 1000;
      this.nextRetry = Math.max(Date.now() + backoff, mirrorRetryAt(config));
      this.host.retryAt(this.nextRetry);
      if (!(error instanceof MirrorSkipped)) {
        // The client's message repeats the whole pipeline (user ids included): keep the cause only.
        const message = error instanceof Error ? error.message.split(', command was:')[0] : String(error);
        log.warn('mirror.write_failed', { goodsId: this.host.goodsId(), ops: ops.length, full, failures: this.failures, message });
      }
      return false;
    }
  }

  /** Rewrites the whole mirror from the object's state now, even while Redis is considered down. */
  repair(): Promise<boolean> {
    this.noteFull();
    return this.flush(true);
  }

  /**
   * Compares the mirror with the object: first lands any pending write, then reads the keys
   * and compares, retrying when the object changed while Redis was read (a live sale), and
   * rewrites everything when `repair` is set and they differ.
   */
  async check(repair: boolean): Promise<MirrorCheck> {
    const staleSince = this.staleSince;
    const config = this.redis();
    if (!config) {
      return { ok: false, reason: 'MIRROR_OFF', staleSince };
    }
    if (!this.host.expectation()) {
      return { ok: false, reason: 'NOT_INITIALIZED', staleSince };
    }
    let flushed: 'none' | 'delta' | 'rewrite' = 'none';
    if (staleSince !== null) {
      const rewrite = this.needsFull;
      if (!(await this.flush(true))) {
        return { ok: false, reason: 'UNREACHABLE', staleSince };
      }
      flushed = rewrite ? 'rewrite' : 'delta';
    }
    for (let attempt = 0; attempt < CHECK_ATTEMPTS; attempt++) {
      const before = this.version;
      let view: MirrorView;
      try {
        // The reconciliation's read, an operator's: it waits as the stats' does, not the 300 ms a
        // shopper's read gets (a loaded Redis that answered in 400 ms was reported unreachable).
        view = await readMirrorView(config, this.host.goodsId() ?? 0, OPERATOR_READ, this.host.stockPart?.());
      } catch {
        return { ok: false, reason: 'UNREACHABLE', staleSince };
      }
      const expected = this.host.expectation();
      if (!expected) {
        return { ok: false, reason: 'NOT_INITIALIZED', staleSince };
      }
      if (this.version !== before || this.flushing) {
        // The object moved while Redis answered: land that change and look again.
        await this.flush(true);
        continue;
      }
      const discrepancies = compareMirror(expected, view);
      const repaired = discrepancies.length > 0 && repair ? await this.repair() : false;
      return { ok: true, staleSince, flushed, view, discrepancies, repaired };
    }
    return { ok: false, reason: 'BUSY', staleSince };
  }
}
